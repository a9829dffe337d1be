"""The nodes' arrival marks: ``<run dir>/.arrived-<job id>/``, written by the job script's
task on every node (templates/task.j2), read by the supervisor's start-up watchdog and by
doctor.

``<node>``: the node got through its setup lines. ``<node>.setup-failed``: its first
failing setup line, as two lines: the exit status, then the line itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

FAILED_SUFFIX = ".setup-failed"
CHECK = "check: "  # a failure of the job script's own check before the setup lines (task.j2)


@dataclass(frozen=True)
class SetupFailure:
    node: str
    status: int | str     # the line's exit status (as the mark says it, if it is no number)
    line: str

    def describe(self) -> str:
        if self.line.startswith(CHECK):  # the job script's own check, which says what failed
            return self.line.removeprefix(CHECK)
        return f"setup line `{self.line}` exited with status {self.status}"


def marks_dir(run_dir: str | Path, job_id: str) -> Path:
    return Path(run_dir) / f".arrived-{job_id}"


def arrived(marks: Path) -> set[str]:
    """The nodes that got through their setup lines."""
    if not marks.is_dir():
        return set()
    return {p.name for p in marks.iterdir() if not p.name.endswith(FAILED_SUFFIX)}


def setup_failures(marks: Path) -> dict[str, SetupFailure]:
    out: dict[str, SetupFailure] = {}
    for p in sorted(marks.glob(f"*{FAILED_SUFFIX}")) if marks.is_dir() else []:
        node = p.name.removesuffix(FAILED_SUFFIX)
        status, _, line = p.read_text(errors="replace").partition("\n")
        out[node] = SetupFailure(node, int(status) if status.strip().isdigit() else status.strip(), line.rstrip("\n"))
    return out
