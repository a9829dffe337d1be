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


def program_error(lines: Iterable[str]) -> str | None:
    """The last ``slurmtrain: error:`` line or Python exception line in ``lines``, or None."""
    found = None
    in_traceback = False
    for raw in lines:
        line = _PREFIX.sub("", raw, count=1).rstrip()
        if line.startswith("slurmtrain: error:"):
            found, in_traceback = line, False
        elif line.startswith("Traceback (most recent call last):"):
            in_traceback = True
        elif in_traceback and line and not line[0].isspace():
            # The first unindented line after the frames names the exception.
            in_traceback = False
            if not line.startswith(_LAUNCHER_EXCEPTIONS):
                found = line
    return found


def program_errors(run: RunDir, job_id: str | None = None) -> dict[str, str]:
    """Node -> the program's last error line, for the nodes ``status`` shows logs of."""
    out = {}
    for node, tail in failing_node_logs(run, job_id, lines=_SCAN_LINES).items():
        line = program_error(tail)
        if line is not None:
            out[node] = line
    return out
