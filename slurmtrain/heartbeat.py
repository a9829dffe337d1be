"""Per-rank heartbeats: ``$SLURMTRAIN_HEARTBEAT_DIR/<rank>``, one line ``STEP NODE PID [MS]``.

A program shows that it makes progress by calling :func:`beat` (the built-in trainer at
every step; any program through ``slurmtrain.stop.heartbeat``, the Hugging Face and
Lightning callbacks by themselves). The job's supervisor reads the files' times: when no
rank has beaten for the hang timeout, the launch hangs (a collective that never returns,
a stopped process), and the ranks that beat last, longest ago, are named. A file is
rewritten at most once a second, by a rename, so a reader never sees half of one.
``MS``, where the program measures it (the built-in trainer: slurmtrain/train/probe.py),
is the rank's own compute time for a fixed piece of work, in milliseconds: the supervisor
compares nodes by it to find a straggler. Torch-free and cheap: one small write a second
per rank.

Beside it, ``<rank>.stack``: the rank's own stack dump (:func:`dump_stacks_on_signal`, which
the stop contract installs), the supervisor's way to a hung rank's stacks where py-spy may
not trace it (Yama's ``ptrace_scope`` 1, Ubuntu's default: only a process's ancestors, and
the ranks are Slurm's step daemon's children, not the supervisor's).
"""

from __future__ import annotations

import faulthandler
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

ENV = "SLURMTRAIN_HEARTBEAT_DIR"
EVERY_S = 1.0
# Its default action is to ignore it: a rank that never installed the dump loses nothing.
STACK_SIGNAL = signal.SIGURG
_last = [0.0]
_stack_file: list = []  # kept open: faulthandler writes to its descriptor from the signal


def beat(step: int | None = None, compute_ms: float | None = None) -> None:
    """This rank made progress (at ``step``, if known; ``compute_ms``: its compute probe's
    time, if it measures one). Does nothing outside a slurmtrain job."""
    folder = os.environ.get(ENV)
    now = time.monotonic()
    if not folder or now - _last[0] < EVERY_S:
        return
    _last[0] = now
    rank = os.environ.get("RANK", "0")
    path = Path(folder) / rank
    tmp = path.with_name(f".{rank}.{os.getpid()}")
    try:
        ms = "" if compute_ms is None else f" {compute_ms:.3f}"
        tmp.write_text(f"{'-' if step is None else int(step)} {os.environ.get('SLURMD_NODENAME', '?')} {os.getpid()}{ms}\n")
        tmp.replace(path)
    except OSError:
        pass  # a heartbeat must never fail the program


def stack_file(folder: Path, rank: int | str) -> Path:
    return Path(folder) / f"{rank}.stack"


def dump_stacks_on_signal() -> bool:
    """On :data:`STACK_SIGNAL`, append every thread's Python stack to this rank's stack file.
    faulthandler's handler is C: it answers while the main thread is blocked in a collective
    (not while the process is stopped). Does nothing outside a slurmtrain job; True when
    installed."""
    folder = os.environ.get(ENV)
    if not folder or _stack_file:
        return bool(_stack_file)
    try:
        f = open(stack_file(Path(folder), os.environ.get("RANK", "0")), "a", encoding="utf-8")
        faulthandler.register(STACK_SIGNAL, file=f, all_threads=True, chain=False)
    except (OSError, ValueError, RuntimeError):
        return False  # like a heartbeat, never a failure of the program
    _stack_file.append(f)
    return True


def folder(run_dir: str | os.PathLike, job_id: str) -> Path:
    return Path(run_dir) / f".heartbeat-{job_id}"


@dataclass(frozen=True)
class Beat:
    rank: int
    step: int | None
    node: str
    pid: int
    time: float  # when it was written (the file's mtime, wall-clock seconds)
    compute_ms: float | None = None


def read(folder: Path) -> list[Beat]:
    out = []
    for p in sorted(folder.iterdir()) if folder.is_dir() else []:
        if not p.name.isdigit():
            continue
        try:
            step, node, pid, *ms = p.read_text().split()
            out.append(Beat(int(p.name), int(step) if step.lstrip("-").isdigit() else None, node, int(pid),
                            p.stat().st_mtime, float(ms[0]) if ms else None))
        except (OSError, ValueError):
            continue
    return sorted(out, key=lambda b: b.rank)
