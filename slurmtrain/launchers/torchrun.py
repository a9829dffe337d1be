"""torchrun: one srun for every node, a torchrun agent on each, given its node rank and the
first node's address (torchrun's static rendezvous). The supervisor knows every node and its
rank before the launch, so no rendezvous round is needed: c10d's agents poll its state once a
second until every node has joined, which cost about 2 s of every start (BENCHMARKS.md)."""

from __future__ import annotations

import re

from ..shellwords import Raw
from .base import Launcher, Words

# torch.distributed.run, under a handler of the stop signal ($SLURMTRAIN_AGENT: task.j2).
AGENT = [Raw('"$SLURMTRAIN_AGENT"'), "torch.distributed.run", Raw('--nnodes="$SLURMTRAIN_NNODES"'),
         Raw('--nproc-per-node="$SLURMTRAIN_PROCS_PER_NODE"')]
PROGRAM = {"module": ["-m"], "exec": ["--no-python"], "script": []}
# A failed worker: torchrun exits 1 with its own traceback (ChildFailedError) and a summary
# whose "Root Cause" gives the worker's exit status; workers that stopped as the stop
# contract says: the job script's agent's one line instead (templates/task.j2).
ROOT_CAUSE = re.compile(r"(?:Root Cause \(first observed failure\):.*?exitcode"
                        r"|the workers stopped after a checkpoint \(exitcode)\s*:\s*(-?\d+)", re.S)
# Its own exceptions: a worker failed; the agent got a signal (srun ending the step after
# another node's task failed).
OWN_EXCEPTIONS = ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError",
                  "torch.distributed.elastic.multiprocessing.api.SignalException")


def static_rendezvous(w: Words) -> list[str]:
    """The node's rank and the first node's store; a node that never comes is an error after
    resilience.rendezvous_timeout (the store's wait), not a hang."""
    return [Raw('--node-rank="$node_rank"'), Raw('--master-addr="$MASTER_ADDR"'), Raw('--master-port="$MASTER_PORT"'),
            Raw(f"--rdzv-conf=timeout={w.rendezvous_timeout}")]


def words(w: Words) -> list[str]:
    return [w.python, "-c", *AGENT, *static_rendezvous(w), *PROGRAM[w.kind]]


LAUNCHER = Launcher("torchrun", "one srun, static rendezvous", words, elastic=True, exit_status_in_log=ROOT_CAUSE,
                    own_exceptions=OWN_EXCEPTIONS)
