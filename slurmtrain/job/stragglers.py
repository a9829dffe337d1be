"""Stragglers: a node whose ranks compute slower than the other nodes', from the compute
time each rank sends with its heartbeat (slurmtrain/train/probe.py, the built-in trainer).

A node is a straggler when its slowest rank's time is above the median of the other
nodes' by more than ``resilience.straggler_pct`` percent, at every look for HOLD_S seconds
(each time is already the median of the rank's last probes: a moment's noise on a shared
machine is not a straggler). Each node is named once per job start. Programs that send no
compute time are not judged.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median

from .. import heartbeat

HOLD_S = 20.0   # slower than the others at every look for this long


@dataclass(frozen=True)
class Straggler:
    node: str
    compute_ms: float
    others_ms: float      # the median of the other nodes'

    @property
    def pct(self) -> float:
        return 100 * (self.compute_ms / self.others_ms - 1)


class StragglerWatch:
    def __init__(self, pct: float):
        self.pct = pct
        self.since: dict[str, float] = {}   # node -> when it was first seen slower
        self.named: set[str] = set()

    def check(self, beats: list[heartbeat.Beat], now: float) -> list[Straggler]:
        """The nodes that have now been slower for HOLD_S, not named before."""
        if self.pct <= 0:
            return []
        per_node: dict[str, float] = {}
        for b in beats:
            if b.compute_ms is not None:
                per_node[b.node] = max(per_node.get(b.node, 0.0), b.compute_ms)
        out = []
        for node, ms in per_node.items():
            others = [v for n, v in per_node.items() if n != node]
            if not others or ms <= median(others) * (1 + self.pct / 100):
                self.since.pop(node, None)
                continue
            first = self.since.setdefault(node, now)
            if now - first >= HOLD_S and node not in self.named:
                self.named.add(node)
                out.append(Straggler(node, ms, median(others)))
        return out
