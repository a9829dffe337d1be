"""Where a run's steps went slower than its usual pace: a slow link or a slow node (every
rank waits for the slowest in each collective), a noisy neighbour, a throttled device.
From ``metrics.jsonl``'s ``step_time`` (the mean over the steps since the previous record)
against the run's median; torch-free, read by ``status``.

The straggler detector (job/stragglers.py) names a node whose own compute is slow; a slow
link slows every node alike, so it shows here, as the run's pace, not as a node.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Any, Iterable

from ..eventlog import Ev

SLOW_FACTOR = 1.5   # a record's mean step time this many times the median is slow
MIN_COST_S = 2.0    # a stretch costing less is noise, not worth a line
# Where a launch begins: its first record's steps include the start's warm-up, not the pace.
_LAUNCH_EVENTS = frozenset({Ev.STARTED, Ev.RELAUNCHED, Ev.FIRST_STEP})


@dataclass(frozen=True)
class Slow:
    first: int       # the first step of the stretch
    last: int        # its last step
    factor: float    # its mean step time over the run's median
    cost_s: float    # seconds beyond the median pace, summed over its steps

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def intervals(records: list[dict[str, Any]], evs: Iterable[dict[str, Any]]) -> list[tuple[int, int, float]]:
    """(first step, last step, mean step time) of each record that follows another of the
    same launch (read_metrics' records: one per step, in step order)."""
    starts = sorted(float(e["time"]) for e in evs if e.get("event") in _LAUNCH_EVENTS
                    and isinstance(e.get("time"), (int, float)))
    out, prev = [], None
    for rec in records:
        t, when = rec.get("step_time"), rec.get("time")
        ok = isinstance(t, (int, float)) and t > 0 and isinstance(when, (int, float))
        if ok and prev is not None and rec["step"] > prev["step"] \
                and not any(prev["time"] < s <= when for s in starts):
            out.append((prev["step"] + 1, rec["step"], float(t)))
        prev = rec if ok else None
    return out


def slow_stretches(records: list[dict[str, Any]], evs: Iterable[dict[str, Any]],
                   factor: float = SLOW_FACTOR) -> list[Slow]:
    """Runs of consecutive slow records, each with its cost; those under MIN_COST_S left out."""
    spans = intervals(records, evs)
    if len(spans) < 3:
        return []
    median = statistics.median(t for _, _, t in spans)
    out: list[Slow] = []
    group: list[tuple[int, int, float]] = []
    for span in spans + [(0, 0, 0.0)]:  # a fast sentinel ends the last group
        if span[2] >= factor * median and (not group or span[0] == group[-1][1] + 1):
            group.append(span)
            continue
        if group:
            steps = sum(b - a + 1 for a, b, _ in group)
            spent = sum((b - a + 1) * t for a, b, t in group)
            cost = spent - steps * median
            if cost >= MIN_COST_S:
                out.append(Slow(group[0][0], group[-1][1], round(spent / steps / median, 1), round(cost, 1)))
        group = [span] if span[2] >= factor * median else []
    return out


def describe(slow: list[dict[str, Any]], shown: int = 3) -> str:
    """``steps 41-60 at 4.3x the median step time (+26 s)``; the costliest first."""
    worst = sorted(slow, key=lambda s: -s["cost_s"])
    text = "; ".join(f"steps {s['first']}-{s['last']} at {s['factor']:g}x the median step time (+{s['cost_s']:g} s)"
                     for s in worst[:shown])
    return text + (f"; and {len(worst) - shown} more" if len(worst) > shown else "")
