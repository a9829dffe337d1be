"""torchrun: one srun for every node, a torchrun agent on each, the c10d rendezvous on the
first node with the job id as its id (a requeued start rendezvouses afresh)."""

from __future__ import annotations

import re

from ..shellwords import Raw
from .base import Launcher, Words

# torch.distributed.run, under a handler of the stop signal ($SLURMTRAIN_AGENT: task.j2).
AGENT = [Raw('"$SLURMTRAIN_AGENT"'), "torch.distributed.run", Raw('--nnodes="$SLURMTRAIN_NNODES"'),
         Raw('--nproc-per-node="$SLURMTRAIN_PROCS_PER_NODE"')]
PROGRAM = {"module": ["-m"], "exec": ["--no-python"], "script": []}
# A failed worker: torchrun exits 1 with its own traceback (ChildFailedError) and a summary
# whose "Root Cause" gives the worker's exit status.
ROOT_CAUSE = re.compile(r"Root Cause \(first observed failure\):.*?exitcode\s*:\s*(-?\d+)", re.S)
OWN_EXCEPTIONS = ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError",)


def words(w: Words) -> list[str]:
    return [w.python, "-c", *AGENT,
            Raw("--rdzv-backend=c10d"), Raw('--rdzv-endpoint="$MASTER_ADDR:$MASTER_PORT"'),
            Raw('--rdzv-id="$SLURM_JOB_ID"'),
            Raw(f'--rdzv-conf="is_host=$(( node_rank == 0 )),join_timeout={w.rendezvous_timeout}"'),
            *PROGRAM[w.kind]]


LAUNCHER = Launcher("torchrun", "one srun, c10d rendezvous", words, elastic=True, exit_status_in_log=ROOT_CAUSE,
                    own_exceptions=OWN_EXCEPTIONS)
