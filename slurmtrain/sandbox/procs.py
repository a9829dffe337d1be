"""Process helpers: pid files, liveness, stopping what we started and nothing else."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def read_pid(pid_file: Path) -> int | None:
    try:
        return int(pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _proc_state(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # "pid (comm) S ...": comm may hold spaces or parentheses, so split after the last ")".
    return stat.rsplit(")", 1)[1].split()[0]


def alive(pid: int | None) -> bool:
    """True if ``pid`` is a running process. Zombies count as gone: where PID 1 does
    not reap orphans (containers), a dead daemon stays a zombie for ever."""
    if not pid:
        return False
    state = _proc_state(pid)
    return state is not None and state not in ("Z", "X")


def exe_name(pid: int) -> str:
    """Base name of the program ``pid`` runs ("" if unknown)."""
    try:
        return os.path.basename(os.readlink(f"/proc/{pid}/exe")).replace(" (deleted)", "")
    except OSError:
        return ""


def runs(pid: int, program: str) -> bool:
    """``pid`` runs ``program``. Debian installs some daemons through alternatives
    (``/usr/sbin/slurmctld`` -> ``slurmctld-wlm``), so the process name counts too."""
    exe = exe_name(pid)
    if exe == program or exe.startswith(program + "-"):
        return True
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == program[:15]
    except OSError:
        return False


def is_ours(pid: int | None, program: str) -> bool:
    """``pid`` is alive and runs ``program``: guards against a recycled pid in a stale pid file."""
    return alive(pid) and runs(pid, program)


def environ_has(pid: int, entry: str) -> bool:
    try:
        data = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return entry.encode() in data.split(b"\0")


def uses_dir(pid: int, root: Path) -> bool:
    """``pid`` works in, or has a file open under, ``root``.

    How a slurmstepd is told apart from another sandbox's: slurmd clears its
    environment, but it runs in the slurmd's log directory and holds its log open."""
    prefix = str(root).rstrip("/") + "/"
    try:
        targets = [os.readlink(f"/proc/{pid}/cwd")]
        targets += [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
    except OSError:
        return False
    return any((t + "/").startswith(prefix) for t in targets)


def all_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def stop(pids: list[int], timeout: float = 10.0) -> list[int]:
    """SIGTERM ``pids``, wait up to ``timeout`` seconds, then SIGKILL the rest.

    Returns the pids still alive afterwards (normally none)."""
    for pid in pids:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.1)
    for pid in pids:
        if alive(pid):
            _signal(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if alive(p)]


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
