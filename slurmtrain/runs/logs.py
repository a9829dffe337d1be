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
from typing import Iterable

from .. import launchers
from .rundir import RunDir
from .track import failing_node_logs

# What launchers put before each line of a task's output: torchrun's "[rank0]:" and
# "[default0]:" (--tee), srun --label's "0: ".
_PREFIX = re.compile(r"^(\[[A-Za-z]*\d+\]:|\d+: )\s?")
# A launcher's own exception (torchrun's), which says only that a worker failed; the worker's is earlier.
_LAUNCHER_EXCEPTIONS = tuple(e for spec in launchers.LAUNCHERS.values() for e in spec.own_exceptions)
_SCAN_LINES = 5000  # of the last 64 KiB a log tail reads: the launcher's report is ~40 lines


# Python itself, before any program ran: `python nosuch.py`, `python -m nosuch`.
_NOT_STARTED = re.compile(r"^\S*python[\d.]*: (can't open file |No module named |Error while finding module spec)")
# torchrun's summary of a worker killed by a signal (SIGKILL from the OOM killer or a person):
# the worker printed nothing, and its node's other workers fail with gloo/NCCL errors after it.
# One block: it ends with a line of "=".
_KILLED = re.compile(r"Root Cause \(first observed failure\):[^=]*?rank\s*:\s*(\d+)[^=]*?exitcode\s*:\s*-(\d+)"
                     r"[^=]*?traceback\s*:\s*Signal \d+ \((SIG\w+)\)")


def program_error(lines: Iterable[str]) -> str | None:
    """The program's own last word in ``lines``: the last ``slurmtrain: error:`` line, Python
    exception line or Python's refusal to start it, or None. A worker that torchrun saw
    killed by a signal is the root cause whatever its peers raised after it."""
    found = None
    in_traceback = False
    seen = []
    for raw in lines:
        line = _PREFIX.sub("", raw, count=1).rstrip()
        seen.append(line)
        if line.startswith("slurmtrain: error:") or _NOT_STARTED.match(line):
            found, in_traceback = line, False
        elif line.startswith("Traceback (most recent call last):"):
            in_traceback = True
        elif in_traceback and line and not line[0].isspace():
            # The first unindented line after the frames names the exception.
            in_traceback = False
            if not line.startswith(_LAUNCHER_EXCEPTIONS):
                found = line
    killed = ([None] + list(_KILLED.finditer("\n".join(seen))))[-1]  # the last launch's
    if killed and killed[3] in _WHY_KILLED:  # not SIGTERM: the launch's own end (a stop, srun's teardown)
        return (f"rank {killed[1]} was killed by {killed[3]} (torchrun's first observed failure: "
                f"{_WHY_KILLED[killed[3]]})")
    return found


_WHY_KILLED = {"SIGKILL": "out of memory, or a kill", "SIGSEGV": "a crash in native code",
               "SIGBUS": "a crash in native code", "SIGABRT": "an abort in native code",
               "SIGILL": "a crash in native code", "SIGFPE": "a crash in native code"}


def program_errors(run: RunDir, job_id: str | None = None) -> dict[str, str]:
    """Node -> the program's last error line, for the nodes ``status`` shows logs of."""
    out = {}
    for node, tail in failing_node_logs(run, job_id, lines=_SCAN_LINES).items():
        line = program_error(tail)
        if line is not None:
            out[node] = line
    return out
