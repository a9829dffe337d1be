"""Where the node-memory tier keeps a job start's copies (slurmtrain/train/memtier.py), known
to the trainer and to the job's supervisor, which removes them when the job ends. Torch-free.

``/dev/shm/slurmtrain/<job>-<restart>/<node>/``: a requeue (Slurm's restart count) is a new
folder, so it loads the durable checkpoint; ``SLURMTRAIN_MEMORY_DIR`` puts it elsewhere.
"""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path
from typing import Mapping

ROOT = Path("/dev/shm/slurmtrain")
ENV = "SLURMTRAIN_MEMORY_DIR"


def start_dir(env: Mapping[str, str] = os.environ) -> Path:
    """This job start's folder (the same path on every node; each node has its own memory)."""
    if env.get(ENV):
        return Path(env[ENV])
    return ROOT / f"{env.get('SLURM_JOB_ID', 'local')}-{env.get('SLURM_RESTART_COUNT', '0')}"


def node_name() -> str:
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def remove_start(env: Mapping[str, str] = os.environ) -> None:
    """The job start is over: its copies on this node go (on the others they go with the
    trainer's own clean end, or with the node's next boot)."""
    folder = start_dir(env)
    shutil.rmtree(folder, ignore_errors=True)
    try:
        folder.parent.rmdir()  # /dev/shm/slurmtrain, once no job's copies are left
    except OSError:
        pass


def newest_step(node: str | None = None, env: Mapping[str, str] = os.environ) -> int | None:
    """The newest step of which ``node`` (this one) holds a copy in this job start, any
    rank's: a restart point the trainer made since its last durable save. None: none."""
    folder = start_dir(env) / (node or node_name())
    steps = []
    for held in folder.glob("step_*"):
        step = held.name[len("step_"):].split("-")[0]
        if step.isdigit() and any(held.glob("rank*.pt")):
            steps.append(int(step))
    return max(steps, default=None)


def earlier_starts(node: str | None = None, env: Mapping[str, str] = os.environ) -> list[Path]:
    """This node's folders of the job's earlier starts (a start that ended by a requeue or a
    crash leaves its copies): the run's clean end removes them too. None under
    ``SLURMTRAIN_MEMORY_DIR`` (a folder of the caller's)."""
    if env.get(ENV) or not env.get("SLURM_JOB_ID"):
        return []
    restart = int(env.get("SLURM_RESTART_COUNT", "0") or 0)
    return [ROOT / f"{env['SLURM_JOB_ID']}-{r}" / (node or node_name()) for r in range(restart)]
