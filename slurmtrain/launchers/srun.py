"""srun: no agent, the Slurm-native way (submitit, Lightning): one Slurm task per process,
each given RANK, LOCAL_RANK, WORLD_SIZE, ... from Slurm's variables (task.j2); signals
reach the program directly."""

from __future__ import annotations

from .base import Launcher, Words


def words(w: Words) -> list[str]:
    return {"module": [w.python, "-m"], "script": [w.python], "exec": []}[w.kind]


LAUNCHER = Launcher("srun", "one Slurm task per process, no agent (RANK etc. from Slurm)", words,
                    agent=False, node_rank=False)
