"""Which nodes a launch runs on, and which nodes to leave out after a launch failed.

The allocation holds the run's nodes and ``slurm.spare_nodes`` more (the job asks Slurm for
N+K with ``--no-kill``, so that a node that dies does not end the job). A launch runs on N
of them. After a launch failed by itself (no stop, no cancel, no `finished`), a node is
left out of the next launch of this job start when:

* it is dead: a probe (``srun --overlap`` on every node of the launch, bounded) gets no
  answer from it, or Slurm holds it down or not responding. A machine that dies hard is
  seen first by its peers, whose collectives fail, and only later by Slurm (after
  ``SlurmdTimeout``): the probe does not wait for Slurm;
* its rank failed first, or was among the last to report before a hang, twice
  (:data:`BLAME_LIMIT`) in this job start: a node that fails again and again.

The run goes on on the remaining nodes when there are N of them (the spares take the place
of the nodes left out); else the job is requeued without those nodes.
"""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from .slurm import Slurm

BLAME_LIMIT = 2     # a node named in this many failed launches of one job start is left out
PROBE_S = 30.0      # how long a probe may take: srun to a dead node waits for its connection timeout
PROBES_AT_ONCE = 32  # one srun per node, this many at a time
HELD_DOWN = "Slurm holds it down or not responding"  # dead()'s word for such a node


@dataclass
class Pool:
    """The allocation's nodes: those the launch runs on, the spares, those left out."""

    allocated: list[str]
    spares: int = 0
    left_out: list[str] = field(default_factory=list)
    blamed: Counter = field(default_factory=Counter)

    @property
    def wanted(self) -> int:
        """How many nodes a launch runs on: the allocation less its spares."""
        return max(1, len(self.allocated) - self.spares)

    @property
    def healthy(self) -> list[str]:
        return [n for n in self.allocated if n not in self.left_out]

    @property
    def active(self) -> list[str]:
        """The nodes of the next launch: the first ``wanted`` that are not left out."""
        return self.healthy[:self.wanted]

    @property
    def idle(self) -> list[str]:
        """Spares not in use."""
        return self.healthy[self.wanted:]

    def can_run_without(self, nodes: list[str]) -> bool:
        return len([n for n in self.healthy if n not in nodes]) >= self.wanted

    def blame(self, nodes: list[str]) -> list[str]:
        """Count a failed launch against ``nodes``; those it has now named BLAME_LIMIT times."""
        self.blamed.update(set(nodes))
        return sorted(n for n in set(nodes) if self.blamed[n] >= BLAME_LIMIT)

    def leave_out(self, nodes: list[str]) -> list[str]:
        """Leave ``nodes`` out of the next launches; the spares that take their place."""
        before = set(self.active)
        self.left_out += [n for n in nodes if n not in self.left_out]
        return [n for n in self.active if n not in before]


def dead(slurm: Slurm, nodes: list[str], suspect: bool = False, why: dict[str, str] | None = None) -> list[str]:
    """The nodes of ``nodes`` that do not answer, and those Slurm holds down or not
    responding. One ``srun`` on all of them first (cheap when all answer), unless
    ``suspect`` (one is known to be wrong); then one per node that did not answer, at once
    (a step with a dead node fails for every node, after srun's connection timeout).
    ``why`` gets srun's words for each node that did not answer: a node taken for dead goes
    to the bad-node ledger, and a healthy one that answered too late must be told apart."""
    if not nodes:
        return []
    said: dict[str, str] = {}
    answered = set() if suspect else set(_ask(slurm, nodes, said))
    silent = [n for n in nodes if n not in answered]
    if silent and (suspect or len(nodes) > 1):
        with ThreadPoolExecutor(max_workers=min(PROBES_AT_ONCE, len(silent))) as pool:
            answered = list(pool.map(lambda n: n in _ask(slurm, [n], said), silent))
        silent = [n for n, ok in zip(silent, answered) if not ok]
    down = slurm.unhealthy(",".join(nodes))
    if why is not None:
        why.update({n: said.get(",".join([n])) or said.get(",".join(nodes), "no answer") for n in silent})
        why.update({n: HELD_DOWN for n in down if n in nodes})
    return sorted(set(silent) | (set(down) & set(nodes)))


def _ask(slurm: Slurm, nodes: list[str], said: dict[str, str]) -> list[str]:
    """The nodes of ``nodes`` where a one-line task ran (each prints its own name); srun's
    last words, where it failed, in ``said`` under the nodes asked."""
    a = slurm.call("srun", "--overlap", f"--nodes={len(nodes)}", f"--ntasks={len(nodes)}", "-w", ",".join(nodes),
                   "--kill-on-bad-exit=0", "bash", "-c", 'echo "$SLURMD_NODENAME"', timeout=PROBE_S)
    if not a.ok:  # srun's last error line, rather than its "Job step aborted: Waiting up to ..."
        lines = a.err.strip().splitlines() or [a.text]
        said[",".join(nodes)] = next((x for x in reversed(lines) if "error:" in x), lines[-1])[:200]
    return a.out.split()
