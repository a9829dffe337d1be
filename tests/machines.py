"""A sandbox machine that dies: its slurmd and everything of its job steps SIGKILLed at once,
for the tests of every lane (the survival tests, and tests/e2e/test_slurm_versions.py, which
also runs on Slurm 24.11 in the Slurm-version lane)."""

from __future__ import annotations

import os
import signal
from pathlib import Path


def kill_machine(node: str, state_dir: Path) -> list[int]:
    """SIGKILL the node's slurmd and every process of a job step on it (its slurmstepd and
    the tasks below it): the sandbox's nodes share this machine, so by their environment."""
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
    for pid in victims:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return sorted(victims)
