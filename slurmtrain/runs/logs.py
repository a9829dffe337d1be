"""What a failed program said last, found in its node logs.

A launcher reports a failed worker at length (torchrun: its own traceback ending in
``ChildFailedError`` and a summary block), and that report is what the tail of a node log
shows. The program's own words come before it: a ``slurmtrain: error:`` line (the
built-in trainer, and any program that follows the convention) or the last line of a
Python traceback (``ValueError: ...``). ``status`` shows that line above the report.

Pure file reading; nothing here talks to Slurm.
"""

from __future__ import annotations

from ..programlog import program_error
from .rundir import RunDir
from .track import failing_node_logs

_SCAN_LINES = 5000  # of the last 64 KiB a log tail reads: the launcher's report is ~40 lines


def program_errors(run: RunDir, job_id: str | None = None) -> dict[str, str]:
    """Node -> the program's last error line, for the nodes ``status`` shows logs of: those
    whose log holds the program's own error first; a peer's failure seen through a
    collective said as such where another node holds the root cause."""
    found = {node: program_error(tail) for node, tail in failing_node_logs(run, job_id, lines=_SCAN_LINES).items()}
    roots = [node for node, e in found.items() if e and e.root]
    out = {node: found[node].line for node in roots}
    for node, e in found.items():
        if e and not e.root:
            out[node] = e.line + (f" (after the failure on {roots[0]})" if roots else "")
    return out
