"""A sandbox machine that dies: its slurmd and everything of its job steps SIGKILLed at once,
for the tests of every lane (the survival tests, and tests/e2e/test_slurm_versions.py, which
also runs on Slurm 24.11 in the Slurm-version lane)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def kill_machine(node: str, state_dir: Path) -> list[int]:
    """SIGKILL the node's slurmd and every process of a job step on it (its slurmstepd and
    the tasks below it): the sandbox's nodes share this machine, so by their environment.

    All of them are stopped first and killed only once every one has stopped, as a machine
    that loses power stops everything at once: killed one by one, a slurmstepd still alive
    for a moment sees its batch script die and tells slurmctld, which then ends the job
    FAILED (exit 0, signal 9) instead of meeting a node that died (seen under load on 24.11)."""
    victims = _processes_of(node, state_dir)
    _signal(victims, signal.SIGSTOP)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not all(_stopped(pid) for pid in victims):
        time.sleep(0.01)
    _signal(victims, signal.SIGKILL)
    return sorted(victims)


def _processes_of(node: str, state_dir: Path) -> set[int]:
    victims = {int((state_dir / "run" / f"slurmd-{node}.pid").read_text())}
    conf = f"SLURM_CONF={state_dir}/slurm.conf".encode()
    for proc in Path("/proc").iterdir():
        try:
            env = (proc / "environ").read_bytes().split(b"\0") if proc.name.isdigit() else []
            if f"SLURMD_NODENAME={node}".encode() not in env or conf not in env:
                continue
            victims.add(int(proc.name))
            parent = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if b"slurmstepd" in (Path("/proc") / str(parent) / "cmdline").read_bytes():
                victims.add(parent)
        except (OSError, ValueError):
            continue
    return victims


def _signal(pids: set[int], sig: signal.Signals) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _stopped(pid: int) -> bool:
    """Stopped (T), or gone (a zombie, or no such process)."""
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("T", "t", "Z", "X")
