"""Helpers for tests/stop: run a training script (alone or under torchrun) in a subprocess."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def job_env(run_dir: Path) -> dict[str, str]:
    """This environment as a slurmtrain job's one process would see it (no Slurm, no ranks)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("SLURM") and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}
    env.update(PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               SLURMTRAIN_RUN_DIR=str(run_dir), SLURMTRAIN_STOP_FILE=str(run_dir / ".stop-1"),
               SLURMTRAIN_STOP_SIGNAL="USR2")
    return env


def torchrun(nproc: int) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
            "--master-addr", "127.0.0.1", "--master-port", str(free_port())]


def run(cmd: list[str], env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    """Run ``cmd`` in its own process group; on timeout the whole group is killed (torchrun's
    workers too) and the test fails with what it printed."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"{' '.join(cmd)} ran past {timeout} s:\n{err[-3000:]}") from None
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def free_port() -> int:
    """A port free now, below the kernel's ephemeral range (tests/train/spawn_ranks.py says why)."""
    import random
    for port in random.sample(range(20000, 32000), 200):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 20000-32000")
