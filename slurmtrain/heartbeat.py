"""Per-rank heartbeats: ``$SLURMTRAIN_HEARTBEAT_DIR/<rank>``, one line ``STEP NODE PID [MS]
[paced] [busy=WHAT@SINCE]``.

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

``paced``: the program beats through its long work too, by :func:`busy` around each save
and evaluation (the built-in trainer): a thread beats while it runs, saying what and since
when (``busy=save@1764150000.0``). For such a program the supervisor can judge a quiet
launch after two minutes, and gives a save or an evaluation that still beats ten
(slurmtrain/job/hangs.py); a program that is not paced keeps the ten-minute floor.

Beside it, ``<rank>.stack``: the rank's own stack dump (:func:`dump_stacks_on_signal`, which
the stop contract installs), the supervisor's way to a hung rank's stacks where py-spy may
not trace it (Yama's ``ptrace_scope`` 1, Ubuntu's default: only a process's ancestors, and
the ranks are Slurm's step daemon's children, not the supervisor's).
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

ENV = "SLURMTRAIN_HEARTBEAT_DIR"
EVERY_S = 1.0
# Its default action is to ignore it: a rank that never installed the dump loses nothing.
STACK_SIGNAL = signal.SIGURG
_last = [0.0]
_said: dict = {"step": None, "ms": None, "paced": False, "busy": False}  # this rank's last beat, for busy()
_stack_file: list = []  # kept open: faulthandler writes to its descriptor from the signal


def beat(step: int | None = None, compute_ms: float | None = None, paced: bool = False) -> None:
    """This rank made progress (at ``step``, if known; ``compute_ms``: its compute probe's
    time, if it measures one; ``paced``: it calls :func:`busy` around its long work). Does
    nothing outside a slurmtrain job."""
    now = time.monotonic()
    if not os.environ.get(ENV) or now - _last[0] < EVERY_S:
        return
    _last[0] = now
    _said.update(step=step, ms=compute_ms, paced=paced)
    _write(step, compute_ms, paced)


def _write(step: int | None, compute_ms: float | None, paced: bool, busy_with: str = "") -> None:
    folder = os.environ.get(ENV)
    if not folder:
        return
    rank = os.environ.get("RANK", "0")
    path = Path(folder) / rank
    tmp = path.with_name(f".{rank}.{os.getpid()}.{threading.get_ident()}")
    words = ['-' if step is None else str(int(step)), os.environ.get('SLURMD_NODENAME', '?'), str(os.getpid())]
    words += [] if compute_ms is None else [f"{compute_ms:.3f}"]
    words += (["paced"] if paced else []) + ([busy_with] if busy_with else [])
    try:
        tmp.write_text(" ".join(words) + "\n")
        tmp.replace(path)
    except OSError:
        pass  # a heartbeat must never fail the program


@contextlib.contextmanager
def busy(what: str) -> Iterator[None]:
    """Beat every second from a thread while ``what`` (a save, an evaluation) runs, saying
    since when: the supervisor allows it longer than a step (slurmtrain/job/hangs.py)."""
    if not os.environ.get(ENV) or _said.get("busy"):  # outside a job, or already busy
        yield
        return
    since, done = time.time(), threading.Event()
    _said["busy"] = True

    def beating() -> None:
        while True:
            _write(_said["step"], _said["ms"], True, f"busy={what}@{since:.1f}")
            if done.wait(EVERY_S):
                return
    thread = threading.Thread(target=beating, name=f"slurmtrain-busy-{what}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        _said["busy"] = False
        _write(_said["step"], _said["ms"], _said["paced"])  # no longer busy
        _last[0] = time.monotonic()


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
    paced: bool = False                # the program beats through its long work (busy)
    busy: str | None = None            # what it is busy with now ("save", "eval"), if anything
    busy_since: float | None = None    # ... since when (wall-clock seconds)


def read(folder: Path) -> list[Beat]:
    out = []
    for p in sorted(folder.iterdir()) if folder.is_dir() else []:
        if not p.name.isdigit():
            continue
        try:
            out.append(_parse(int(p.name), p.read_text().split(), p.stat().st_mtime))
        except (OSError, ValueError):
            continue
    return sorted(out, key=lambda b: b.rank)


def _parse(rank: int, words: list[str], mtime: float) -> Beat:
    step, node, pid, *rest = words
    ms = next((float(w) for w in rest if w[:1].isdigit()), None)
    busy = next((w[len("busy="):] for w in rest if w.startswith("busy=")), None)
    what, _, since = (busy or "").partition("@")
    return Beat(rank, int(step) if step.lstrip("-").isdigit() else None, node, int(pid), mtime, ms,
                paced="paced" in rest or busy is not None, busy=what or None,
                busy_since=float(since) if since else None)
