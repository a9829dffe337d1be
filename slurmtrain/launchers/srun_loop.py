"""srun-loop: one ``srun -w NODE`` per node, each a torchrun agent given its node rank
(a static rendezvous), for sites where a single srun cannot start the containers."""

from __future__ import annotations

from .base import Launcher, Words
from .torchrun import AGENT, OWN_EXCEPTIONS, PROGRAM, ROOT_CAUSE, static_rendezvous


def words(w: Words) -> list[str]:
    return [w.python, "-c", *AGENT, *static_rendezvous(w), *PROGRAM[w.kind]]


LAUNCHER = Launcher("srun-loop", "one srun per node", words, per_node_srun=True, elastic=True,
                    exit_status_in_log=ROOT_CAUSE, own_exceptions=OWN_EXCEPTIONS)
