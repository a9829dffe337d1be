"""What a failed program said last, found in its node logs.

A launcher reports a failed worker at length (torchrun: its own traceback ending in
``ChildFailedError`` and a summary block), and that report is what the tail of a node log
shows. The program's own words come before it: a ``slurmtrain: error:`` line (the
built-in trainer, and any program that follows the convention) or the last line of a
Python traceback (``ValueError: ...``). ``status`` shows that line above the report.

Pure file reading; nothing here talks to Slurm.
"""

from __future__ import annotations

import re

from .. import eventlog
from ..programlog import program_error
from ..slurmtext import RELAUNCH_SAID
from .rundir import RunDir, events_of
from .track import failing_node_logs, tail

_SCAN_LINES = 5000  # of the last 64 KiB a log tail reads: the launcher's report is ~40 lines


def program_errors(run: RunDir, job_id: str | None = None) -> dict[str, str]:
    """Node -> the program's last error line, for the nodes ``status`` shows logs of: those
    whose log holds the program's own error first; a peer's failure seen through a
    collective said as such where another node holds the root cause."""
    found = {node: program_error(tail) for node, tail in failing_node_logs(run, job_id, lines=_SCAN_LINES).items()}
    roots = [node for node, e in found.items() if e and e.root]
    out = {node: found[node].line for node in roots}
    killed = None if roots else _killed_first(run, job_id)
    if killed is not None:  # a process killed says nothing: srun's word; a peer's error follows from it
        roots, out = [killed], {killed: f"a task on {killed} was killed by SIGKILL (out of memory, or a kill)"}
    for node, e in found.items():
        if e and not e.root and node not in out:
            out[node] = e.line + (f" (after the failure on {roots[0]})" if roots else "")
    return out


# srun's line for any task that ended badly ("Exited with exit code 1", "Killed",
# "Segmentation fault (core dumped)"...), in the batch log.
_SRUN_TASK_ENDED = re.compile(r"^srun: error: (?P<node>\S+): tasks? [\d,-]+: (?P<how>.+)$")


def _killed_first(run: RunDir, job_id: str | None) -> str | None:
    """The node of the first task srun reported ending badly in the last launch, where that
    task was killed (``srun: error: n2: task 1: Killed``); None otherwise."""
    for batch in run.batch_logs(job_id or run.job_id).values():
        lines = tail(batch, 200)
        last = max((i for i, line in enumerate(lines) if RELAUNCH_SAID in line), default=-1)
        first = next(filter(None, map(_SRUN_TASK_ENDED.match, lines[last + 1:])), None)
        if first is not None:
            return first["node"] if first["how"].strip() == "Killed" else None
    return None


# bash's own error in the batch script: "<spool>/job00460/slurm_script: line 30: X: unbound variable"
_SCRIPT_ERROR = re.compile(r"slurm_script: line (\d+): (.+)$")


def script_error(run: RunDir, job_id: str | None = None) -> str | None:
    """The job script's own error where it failed before its supervisor started (no
    ``started`` event of the job): bash's words, with the line of the run's job.sbatch they
    name; None where the batch log has none."""
    job_id = job_id or run.job_id
    if not job_id or any(e.get("event") == eventlog.Ev.STARTED and eventlog.job_of(e) == job_id
                         for e in events_of(run.path)):
        return None
    for batch in run.batch_logs(job_id).values():
        found = next(filter(None, map(_SCRIPT_ERROR.search, tail(batch, 200))), None)
        if found:
            number = int(found[1])
            try:
                line = run.script.read_text(errors="replace").splitlines()[number - 1].strip()
            except (OSError, IndexError):
                line = ""
            return f"the job script stopped at its line {number}: {found[2]}" + (f"  ({line})" if line else "")
    return None
