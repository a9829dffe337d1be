"""Waits that hold on a busy machine: a wait fails when nothing has moved for a while,
not after a fixed total.

A fixed budget ("done within 420 s") fails a test whose job is still progressing when
the machine is loaded; a wait here fails only when its *progress fingerprint* (sizes and
modification times of the files a job writes, Slurm's state of the job, a process's
output) has not changed for ``STALL_S`` seconds, or after the very large ``CAP_S``.

``SLURMTRAIN_TEST_STALL_S`` and ``SLURMTRAIN_TEST_CAP_S`` override both (seconds).
Importable from every test directory (pytest puts ``tests/`` on ``sys.path`` for
tests/conftest.py).
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Callable, Iterable, TypeVar

STALL_S = float(os.environ.get("SLURMTRAIN_TEST_STALL_S", "180"))  # no progress this long: fail
CAP_S = float(os.environ.get("SLURMTRAIN_TEST_CAP_S", "3600"))     # never wait longer than this

T = TypeVar("T")


def files_fingerprint(*roots: Path | str | None) -> tuple:
    """(path, size, mtime) of every file under ``roots`` (files or directories): it
    changes when a job appends an event, a metrics line or a log line, or writes a
    checkpoint."""
    out = []
    for root in roots:
        if root is None:
            continue
        root = Path(root)
        paths: Iterable[Path] = [root] if root.is_file() else (root.rglob("*") if root.is_dir() else [])
        for p in paths:
            try:
                s = p.stat()
            except OSError:  # removed while we looked (a checkpoint being replaced)
                continue
            if not p.is_dir():
                out.append((str(p), s.st_size, s.st_mtime_ns))
    return tuple(sorted(out))


class Progress:
    """Remembers when ``fingerprint()`` last changed; :meth:`check` raises once it has not
    for ``stall`` seconds, or ``cap`` seconds after the start."""

    def __init__(self, fingerprint: Callable[[], object], stall: float = STALL_S, cap: float = CAP_S):
        self.fingerprint, self.stall, self.cap = fingerprint, stall, cap
        self.started = self.moved = time.monotonic()
        self.last = fingerprint()

    def check(self, what: str, details: Callable[[], str] = lambda: "") -> None:
        now = time.monotonic()
        current = self.fingerprint()
        if current != self.last:
            self.last, self.moved = current, now
        if now - self.moved > self.stall:
            raise AssertionError(f"no progress for {self.stall:.0f} s (after {now - self.started:.0f} s in all) "
                                 f"waiting for {what}\n{details()}\n{slurm_queue()}")
        if now - self.started > self.cap:
            raise AssertionError(f"still waiting for {what} after {self.cap:.0f} s, though it progressed "
                                 f"{now - self.moved:.0f} s ago\n{details()}\n{slurm_queue()}")


def slurm_queue() -> str:
    """Every job of the sandbox in use (SLURM_CONF) and its nodes' states: whether a stalled
    job waits on another one (say, a job left from an earlier run) or on a node that is down."""
    if not os.environ.get("SLURM_CONF"):
        return "(no SLURM_CONF: no queue to show)"
    lines = []
    for argv in (["squeue", "-a", "-o", "%i %T %r %j %u %N %M"], ["sinfo", "-N", "-o", "%N %T %E"]):
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=15)
            lines.append(f"$ {' '.join(argv)}\n{(proc.stdout + proc.stderr).strip()}")
        except (OSError, subprocess.TimeoutExpired) as err:
            lines.append(f"$ {' '.join(argv)}: {err}")
    return "\n".join(lines)


def wait_for(what: str, pred: Callable[[], T], fingerprint: Callable[[], object], poll: float = 1.0,
             details: Callable[[], str] = lambda: "", stall: float = STALL_S, cap: float = CAP_S,
             on_poll: Callable[[], None] | None = None) -> T:
    """Poll ``pred()`` until it is truthy and return its value; fail when ``fingerprint()``
    has not changed for ``stall`` seconds (or after ``cap``) with ``details()`` in the message."""
    progress = Progress(fingerprint, stall, cap)
    while True:
        value = pred()
        if value:
            return value
        progress.check(what, details)
        if on_poll is not None:
            on_poll()
        time.sleep(poll)


def communicate(proc: subprocess.Popen, what: str, watch: Iterable[Path | str] = (), stall: float = STALL_S,
                cap: float = CAP_S) -> tuple:
    """``proc.communicate()`` that kills the process and fails only when neither its output
    nor the files under ``watch`` have grown for ``stall`` seconds (or after ``cap``)."""
    chunks: list[tuple] = []
    watch = list(watch)

    def fingerprint():
        return files_fingerprint(*watch), sum(len(c[0] or "") + len(c[1] or "") for c in chunks)

    progress = Progress(fingerprint, stall, cap)
    while True:
        try:
            return proc.communicate(timeout=min(5.0, max(0.2, stall / 4)))
        except subprocess.TimeoutExpired as err:
            # What it printed so far (communicate keeps it; the exception carries a copy).
            chunks[:] = [(err.output, err.stderr)]
        try:
            progress.check(what)
        except AssertionError:
            proc.kill()
            out, err = proc.communicate()
            raise AssertionError(f"{what}: killed after no progress for {stall:.0f} s\n--- stdout\n"
                                 f"{(out or '')[-3000:]}\n--- stderr\n{(err or '')[-6000:]}") from None


def run(argv: list[str], what: str, watch: Iterable[Path | str] = (), stall: float = STALL_S,
        cap: float = CAP_S, **popen) -> subprocess.CompletedProcess:
    """``subprocess.run(argv, capture_output=True, text=True, ...)`` with :func:`communicate`'s
    progress-following deadline instead of a fixed ``timeout``."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)
    out, err = communicate(proc, what, watch, stall, cap)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)
