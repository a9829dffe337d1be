"""``resilience.checkpoint_every = "auto"``: how often the built-in trainer saves, from the
numbers (Young and Daly): an interval of sqrt(2 x C x M), where C is what a checkpoint
costs the training (seconds it stalls) and M the mean time between faults of the job.

M comes from ``resilience.node_mtbf_hours`` (per node, so the job's shrinks with its node
count) refined by the faults this run has met: the profile's figure counts as one fault
seen over that many node-hours, and each fault of the run (a crash, hang or node lost in
the job, a node failure) with the node-hours it has run so far is added to it, so a run on
flaky nodes saves more often. Pure arithmetic, torch-free; the trainer measures C and the
step time, and all ranks take the same answer (the largest: an all-reduce).

With ``train.memory_steps`` the copies in node memory follow a cadence of their own, the
same formula with C what a copy stalls the loop (its copy into host memory; the write and
the send to the peer go on beside the steps, and a copy still in flight when the next is
due is waited for, so a copy slower than the interval counts in C and spaces them out).
A durable save and a copy are both points to restart from: each counts for the other's
"since the last". The recipe's ``save_steps`` and ``memory_steps`` are the first intervals.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass

from . import eventlog

ENV_MODE, ENV_MTBF = "SLURMTRAIN_CHECKPOINT_EVERY", "SLURMTRAIN_NODE_MTBF_HOURS"
# goodput's kinds that are faults, not stops
FAULT_KINDS = (eventlog.CRASH, eventlog.HANG, eventlog.NODE_LOST, eventlog.NODE_FAILURE)


@dataclass(frozen=True)
class Interval:
    steps: int
    seconds: float        # the Young-Daly interval
    cost_s: float         # what a checkpoint stalls the training
    step_s: float
    job_mtbf_h: float
    nodes: int
    faults: int           # seen by this run
    node_hours: float     # ... in this many node-hours

    def to_event(self) -> dict:
        return {k: (float(f"{v:.4g}") if isinstance(v, float) else v) for k, v in asdict(self).items()}


def auto() -> float | None:
    """The profile's node MTBF (hours) when the job asks for "auto", else None."""
    if os.environ.get(ENV_MODE) != "auto":
        return None
    try:
        return float(os.environ.get(ENV_MTBF, "")) or None
    except ValueError:
        return None


def job_mtbf_hours(node_mtbf_h: float, nodes: int, faults: int, node_hours: float) -> float:
    per_node_hour = (1 + faults) / (node_mtbf_h + node_hours)
    return 1 / (per_node_hour * max(1, nodes))


def choose(cost_s: float, step_s: float, node_mtbf_h: float, nodes: int, faults: int = 0,
           node_hours: float = 0.0) -> Interval:
    mtbf_h = job_mtbf_hours(node_mtbf_h, nodes, faults, node_hours)
    seconds = math.sqrt(2 * max(cost_s, 1e-3) * mtbf_h * 3600)
    steps = max(1, round(seconds / max(step_s, 1e-6)))
    return Interval(steps, seconds, cost_s, step_s, mtbf_h, nodes, faults, node_hours)


def run_faults(run_dir) -> tuple[int, float]:
    """(faults, allocated node-hours) of the run so far, from its events (runs/goodput.py)."""
    from . import events
    from .runs import goodput

    g = goodput.of_events(events.read(run_dir))
    return sum(1 for f in g.faults if f.kind in FAULT_KINDS), g.allocated / 3600


def describe(e: dict) -> str:
    """A ``checkpoint_interval`` event as one line for ``status``."""
    each = "copy in node memory" if e.get("tier") == "memory" else "checkpoint"
    return (f"every {e.get('steps')} steps (~{e.get('seconds', 0) / 60:.1f} min): sqrt(2 x {e.get('cost_s')} s per "
            f"{each} x {e.get('job_mtbf_h', 0):.1f} h between faults of {e.get('nodes')} node(s); "
            f"{e.get('faults')} fault(s) seen in {e.get('node_hours', 0):.1f} node-hours)")


class Cadence:
    """The trainer's side: when the next save is due, in steps since the last save."""

    FIRST_STEPS = 100  # before any checkpoint was timed (the recipe's save_steps when it has one)

    def __init__(self, node_mtbf_h: float, nodes: int, run_dir, first: int = 0):
        self.node_mtbf_h, self.nodes, self.run_dir = node_mtbf_h, nodes, run_dir
        self.every = first or self.FIRST_STEPS
        self.step_times: list[float] = []
        self._last: float | None = None

    def tick(self, now: float, saved: bool = False) -> None:
        """A step ended at ``now`` (a step with a save in it is not a step's time)."""
        if self._last is not None and not saved:
            self.step_times = (self.step_times + [now - self._last])[-50:]
        self._last = now

    def due(self, step: int, last_saved: int) -> bool:
        """``last_saved``: the checkpointer's (-1 before any save or resume: counted from 0)."""
        return step - max(last_saved, 0) >= self.every

    def step_s(self) -> float | None:
        """The median of the recent steps' times (None: no step timed yet)."""
        return sorted(self.step_times)[len(self.step_times) // 2] if self.step_times else None

    def after_save(self, cost_s: float, step_s: float | None = None) -> Interval | None:
        """The choice after a save that stalled training ``cost_s``, steps taking ``step_s``
        (default: this rank's own median; the trainer gives every rank the slowest's, so that
        they all choose alike and the event's figures are the ones the choice came from)."""
        step_s = self.step_s() if step_s is None else step_s
        if step_s is None:
            return None
        faults, node_hours = run_faults(self.run_dir)
        return choose(cost_s, step_s, self.node_mtbf_h, self.nodes, faults, node_hours)
