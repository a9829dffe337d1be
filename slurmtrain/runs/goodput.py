"""Goodput: the share of the node time a run was given that trained steps it kept, and
where the rest went. Read from ``events.jsonl`` alone, for any program the supervisor
ran (the built-in trainer, a user's program, a Hugging Face or Lightning script).

Every second of an allocation (``started`` to the start's last event, times its nodes)
goes to one part:

==========  ============================================================================
trained     first progress of a launch to its last, less what is counted below
startup     the job start to its first launch's first progress (``first_step``)
checkpoint  the seconds a save held the training (``checkpoint_saved {stall}``; without
            it, as from programs that save synchronously, all of ``seconds``; a save
            reported without ``seconds`` costs nothing known, but ends the lost steps)
lost        a launch's last checkpoint to its last progress, when a fault ended it:
            steps that are trained again; and a launch's steps up to the run's newest
            checkpoint when it did not resume from it (``resumed_behind``)
hang        the last progress to the supervisor's detection (``hang {seconds}``)
restart     a fault's last progress to the next launch's first progress (in the job)
spare       a spare node's time until it takes a lost node's place (``slurm.spare_nodes``)
other       the rest: stopping, requeueing, the job's end
==========  ============================================================================

Where several parts claim the same second, the one later in ``PRIORITY`` takes it (a
checkpoint inside trained time is a checkpoint; trained time after the last checkpoint
before a crash is lost). Queue wait (``submitted``/a requeue to ``started``) is wall
time, not allocated: it is reported beside the share, not in it.

Each interruption (a crash or hang restarted in the job, a stop or node failure that
requeued, a failure that ended the run) is charged what it cost: its lost, hang and
restart seconds, and for a requeue also the end of its start, the queue wait and the next
start's start-up.

Progress is seen through heartbeats (the supervisor writes ``first_step`` when a launch's
first heartbeat arrives; ``relaunched`` carries the last one's time). A program that sends
none has no start-up or lost time to measure: its launches count as trained from their
start, and :attr:`Goodput.progress_known` is False.

Torch-free: the standard library and :mod:`slurmtrain.eventlog`.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass, field
from typing import Any, Iterable

from .. import eventlog
from ..eventlog import Ev, Event

PARTS = ("trained", "startup", "checkpoint", "lost", "hang", "restart", "spare", "other")
PRIORITY = ("other", "trained", "startup", "restart", "checkpoint", "lost", "hang")


@dataclass(frozen=True)
class Span:
    part: str                 # one of PARTS, or "queue"
    begin: float              # wall-clock seconds
    end: float
    nodes: int                # 0 for queue wait: nothing is allocated
    fault: int | None = None  # the index in Goodput.faults this second is charged to


@dataclass(frozen=True)
class Fault:
    kind: str                 # crash, hang, preempted, time limit, node failure, failed, ...
    time: float
    detail: str
    in_job: bool              # recovered inside the allocation (no requeue)


@dataclass
class Goodput:
    spans: list[Span] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    progress_known: bool = True
    tasks: int = 1            # an array's tasks, summed: their queue waits add up though they overlap

    def node_seconds(self, part: str | None = None) -> float:
        return sum((s.end - s.begin) * s.nodes for s in self.spans if part is None or s.part == part)

    @property
    def allocated(self) -> float:
        return self.node_seconds()

    @property
    def queue_s(self) -> float:
        return sum(s.end - s.begin for s in self.spans if s.part == "queue")

    @property
    def share(self) -> float | None:
        return self.node_seconds("trained") / self.allocated if self.allocated > 0 else None

    def cost(self, fault: int) -> dict[str, float]:
        """What fault ``fault`` cost, by part: node-seconds (``queue``: wall seconds)."""
        out: dict[str, float] = {}
        for s in self.spans:
            if s.fault == fault:
                out[s.part] = out.get(s.part, 0.0) + (s.end - s.begin) * (s.nodes or 1)
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "share": None if self.share is None else round(self.share, 4),
            "allocated_node_s": round(self.allocated, 1),
            "node_s": {p: round(self.node_seconds(p), 1) for p in PARTS},
            "queue_s": round(self.queue_s, 1),
            "progress_known": self.progress_known,
            "tasks": self.tasks,
            "faults": [{"kind": f.kind, "time": f.time, "detail": f.detail, "in_job": f.in_job,
                        "cost": {k: round(v, 1) for k, v in self.cost(i).items()}}
                       for i, f in enumerate(self.faults)],
        }


def of_events(evs: Iterable[Event], now: float | None = None) -> Goodput:
    """The goodput of a run (all its starts) from its events; ``now`` ends a start that is
    still running. An array job's tasks are summed."""
    # A line a program wrote by hand without a time cannot be placed: left out, not a traceback.
    evs = [e for e in evs if isinstance(e.get("time"), (int, float)) and not isinstance(e.get("time"), bool)]
    now = time.time() if now is None else now
    tasks = eventlog.tasks(evs) if eventlog.array_size(evs) else {None: evs}
    out = Goodput(tasks=len(tasks))
    for task_evs in tasks.values():
        _add_run(out, task_evs, now)
    return out


# ---- one run (one task of an array) --------------------------------------------------

# A job cancelled before it started, or a chain's run whose upstream can no longer complete
# (Slurm cancels it): its wait in the queue ends there.
_NEVER_STARTS = (Ev.CANCEL_REQUESTED, Ev.DEPENDENCY_NEVER_SATISFIED)


# A launch whose program never ran (a setup line failed, a node never joined): start-up
# to its end, even for a program that sends no heartbeat.
_NOTHING_RAN = (Ev.SETUP_FAILED, Ev.WATCHDOG_TIMEOUT)


@dataclass(frozen=True)
class _Claim:
    part: str
    begin: float
    end: float
    fault: int | None = None


def _add_run(out: Goodput, evs: list[Event], now: float) -> None:
    known = any(e.get("event") == Ev.FIRST_STEP for e in evs)
    out.progress_known &= known or not any(e.get("event") == Ev.STARTED for e in evs)
    starts = eventlog.split(evs)
    carried: int | None = None     # the fault that ended the previous start: its queue and start-up
    prev_end: float | None = None
    for i, start in enumerate(starts):
        later = i + 1 < len(starts)
        st, opened = start.started, start.submission
        opened_at = opened["time"] if opened else prev_end
        if st is None:
            if opened_at is not None and not later:  # still waiting in the queue, or until it was given up
                gave_up = [e["time"] for e in start.events if e.get("event") in _NEVER_STARTS]
                out.spans.append(Span("queue", opened_at, max(opened_at, min(gave_up, default=now)), 0, carried))
            continue
        if opened_at is not None and opened_at < st["time"]:
            out.spans.append(Span("queue", opened_at, st["time"], 0, carried))
        running = not later and eventlog.outcome(start).kind == eventlog.RUNNING
        # The job's own last word ends its node time: a command's event (a cancel of the job
        # pending again after a requeue) says nothing of nodes held.
        end = now if running else max((e["time"] for e in start.events if e.get("event") not in eventlog.CLI_EVENTS),
                                      default=st["time"])
        claims, ended_by = _claims(out, start, end, carried, known)
        spares = str(st.get("spares", "")).split()
        nodes = (len(str(st.get("nodes", "")).split()) or 1) - len(spares)
        out.spans.extend(_paint(claims, st["time"], end, nodes))
        out.spans.extend(_spares(start, spares, end))
        carried, prev_end = ended_by, end


def _claims(out: Goodput, start: eventlog.Start, end: float, carried: int | None,
            known: bool) -> tuple[list[_Claim], int | None]:
    """What each launch of the start claims; the fault that ended the start, if any."""
    claims: list[_Claim] = []
    launches = _launches(start, end)
    prev_progress: float | None = None
    prev_fault: int | None = None
    for n, (begin, evs, until) in enumerate(launches):
        first = next((_at(e) for e in evs if e.get("event") == Ev.FIRST_STEP), None)
        if not known and not any(e.get("event") in _NOTHING_RAN for e in evs):
            first = begin  # a program that sends no heartbeat: counted as trained from its launch
        if n == 0:
            claims.append(_Claim("startup", begin, first if first is not None else until, carried))
        else:
            claims.append(_Claim("restart", prev_progress or begin, first if first is not None else until,
                                 prev_fault))
        saves = _saves(evs)
        claims += [_Claim("checkpoint", began, went_on) for began, went_on in saves]
        nxt = launches[n + 1][1][0] if n + 1 < len(launches) else None  # the next launch's `relaunched`
        progress, fault = _launch_end(out, evs, nxt, until)
        if first is not None:
            claims.append(_Claim("trained", first, progress))
            claims += _trained_again(out, evs, first, progress)
            if fault is not None:
                went_on = [t for _, t in saves if t <= progress]
                kept = _memory_copy_time(evs, launches[n + 1][1]) if nxt is not None else None
                claims.append(_Claim("lost", max([first, *went_on, *([kept] if kept else [])]), progress, fault))
        hang = next((e for e in evs if e.get("event") == Ev.HANG), None)
        if hang is not None:
            claims.append(_Claim("hang", hang["time"] - float(hang.get("seconds", 0)), hang["time"], fault))
        quiet = next(filter(None, map(_unnoticed, evs)), None)
        if quiet is not None and hang is None:  # Slurm's detection, not the supervisor's
            claims.append(_Claim("hang", *quiet, fault))
        prev_progress, prev_fault = progress, fault
    if prev_fault is not None and not out.faults[prev_fault].in_job:
        claims.append(_Claim("other", prev_progress or end, end, prev_fault))  # stopping, requeueing
    return claims, prev_fault if prev_fault is not None and not out.faults[prev_fault].in_job else None


def _trained_again(out: Goodput, evs: list[Event], first: float, progress: float) -> list[_Claim]:
    """A launch that did not resume from the run's newest checkpoint (``resumed_behind``):
    its steps up to that checkpoint's are trained again, lost, charged to a fault of their
    own. When it reached that step is placed at the pace of its reports with a step
    (first_step, then its checkpoints, stop or finish); a launch that ended before lost all."""
    behind = next((e for e in evs if e.get("event") == Ev.RESUMED_BEHIND), None)
    if behind is None or not isinstance(behind.get("saved"), int) or not isinstance(behind.get("step"), int):
        return []
    saved, s0 = behind["saved"], behind["step"]
    # The pace from the first step to the first report at or past the checkpoint's step; else
    # to the last report with a step (a launch still short of it: the rest extrapolated).
    reports = [e for e in evs if e.get("event") in (Ev.CHECKPOINT_SAVED, Ev.STOPPED, Ev.FINISHED, Ev.RELAUNCHED)
               and isinstance(e.get("step", e.get("last_step")), int) and e["time"] > first]
    steps = [(e.get("step", e.get("last_step")), float(e.get("last_progress", e["time"]))) for e in reports]
    known = next(((s, t) for s, t in steps if s >= saved), None) or max(steps, default=None)
    until = progress
    if known is not None and known[0] > s0:
        until = min(progress, first + (saved - s0) / (known[0] - s0) * (known[1] - first))
    if until <= first:
        return []
    fault = _fault(out, "trained again", behind["time"], f"began at step {s0}, below the checkpoint of step "
                   f"{saved}: the program did not resume from it", True)
    return [_Claim("lost", first, until, fault)]


def _memory_copy_time(evs: list[Event], nxt: list[Event]) -> float | None:
    """When the launch trained the step the next one resumed from node memory (its copies
    are no events): placed between the launch's first step and its last reported one (the
    ``relaunched``'s ``last_step``) at their pace. The steps before it were kept, not lost."""
    resumed = next((e for e in nxt if e.get("event") == Ev.RESUMED and e.get("tier") == "memory"), None)
    first = next((e for e in evs if e.get("event") == Ev.FIRST_STEP), None)
    again = nxt[0] if nxt else {}
    if resumed is None or first is None or not all(isinstance(x, (int, float)) for x in (
            resumed.get("step"), first.get("step"), again.get("last_step"), again.get("last_progress"))):
        return None
    s0, s1, step = first["step"], again["last_step"], resumed["step"]
    if not s0 <= step <= s1 or s1 == s0:
        return None
    t0 = _at(first)
    return t0 + (step - s0) / (s1 - s0) * (float(again["last_progress"]) - t0)


def _saves(evs: list[dict]) -> list[tuple[float, float]]:
    """(began, training went on) of each save in ``evs``. An asynchronous save is reported
    when its write is durable, long after the training went on: its ``stall`` says how long
    it held the loop; a synchronous one held it for all its ``seconds``. A save reported
    without its time (a user's program: ``slurmtrain.stop.saved``) is a restart point of no
    known cost, at its report. A stop's own save (of the step it stopped at) held the loop
    until the stop was said: the stop waits for its write, no step trained meanwhile (its
    background write once counted as lost steps at every time limit)."""
    stops = {e.get("step"): e["time"] for e in evs if e.get("event") == Ev.STOPPED
             and isinstance(e.get("time"), (int, float))}
    out = []
    for e in evs:
        if e.get("event") != Ev.CHECKPOINT_SAVED or not isinstance(e.get("time"), (int, float)):
            continue
        if not isinstance(e.get("seconds"), (int, float)):
            out.append((e["time"], e["time"]))
            continue
        began = e["time"] - e["seconds"]
        held = e.get("stall")
        went_on = began + (held if isinstance(held, (int, float)) else e["seconds"])
        out.append((began, max(went_on, stops.get(e.get("step"), went_on))))
    return out


def _spares(start: eventlog.Start, spares: list[str], end: float) -> list[Span]:
    """Each idle spare's time, until a ``nodes_lost`` put it in a lost node's place."""
    used = {n: e["time"] for e in start.events if e.get("event") == Ev.NODES_LOST
            for n in str(e.get("spares", "")).split()}
    begin = start.started["time"]
    return [Span("spare", begin, min(used.get(n, end), end), 1) for n in spares if min(used.get(n, end), end) > begin]


def _launches(start: eventlog.Start, last: float) -> list[tuple[float, list[Event], float]]:
    """(begin, events, end) of each launch (eventlog.by_launch); the last ends at ``last``."""
    chunks = eventlog.by_launch(start.events)
    return [(start.started["time"] if n == 0 else evs[0]["time"], evs,
             chunks[n + 1][0]["time"] if n + 1 < len(chunks) else last) for n, evs in enumerate(chunks)]


def _launch_end(out: Goodput, evs: list[Event], nxt: Event | None, until: float) -> tuple[float, int | None]:
    """When the launch last made progress, and the fault (an index in out.faults) that
    ended it, if one did: a stop that saved, or the program's finish, is none."""
    names = {e.get("event") for e in evs}
    hang = next((e for e in evs if e.get("event") == Ev.HANG), None)
    if nxt is not None:  # restarted in the job: a crash, a hang, a node lost or a straggler
        return _in_job_fault(out, evs, nxt, hang)
    program_end = next((e for e in reversed(evs) if e.get("event") in (Ev.STOPPED,) or
                        eventlog.is_program_finished(e)), None)
    if program_end is not None:
        kind = _stop_kind(evs) if program_end.get("event") == Ev.STOPPED else None
        fault = None if kind is None else _fault(out, kind, program_end["time"], "stopped after a checkpoint",
                                                 False, requeued=bool({Ev.REQUEUE, Ev.REQUEUED_BY_SLURM} & names))
        return program_end["time"], fault
    left_out = next((e for e in evs if e.get("event") in (Ev.REQUEUE, Ev.REQUEUE_LIMIT) and e.get("cause")), None)
    if left_out is not None:  # nodes lost, no spare (or no in-job restart) left: requeued without them
        return _requeued_without(out, evs, left_out, hang)
    ending = next((e for e in evs if e.get("event") in (Ev.REQUEUED_BY_SLURM, Ev.PREEMPTED, Ev.SIGNAL, Ev.FAILED,
                                                         Ev.STOP_UNSAVED, Ev.CANCELLED)), None)
    if ending is None:
        return until, None  # still running, or the script was killed with no word
    kind = {Ev.REQUEUED_BY_SLURM: eventlog.requeue_fault(ending),
            Ev.FAILED: "failed", Ev.CANCELLED: "cancelled"}.get(ending["event"]) or _stop_kind(evs) or "stopped"
    quiet = _unnoticed(ending)
    detail = "ended without a checkpoint of its last steps" + (
        f"; no progress for {quiet[1] - quiet[0]:.0f} s before Slurm noticed" if quiet else "")
    return (quiet[0] if quiet else ending["time"]), _fault(
        out, kind, ending["time"], detail, False, requeued=Ev.REQUEUE in names or Ev.REQUEUED_BY_SLURM in names
        or kind in ("node failure", "requeued"))


def _unnoticed(e: Event) -> tuple[float, float] | None:
    """(last progress, Slurm's requeue) of a launch Slurm ended for a node failure it
    noticed only after the node went quiet (its SlurmdTimeout); None for any other end."""
    if e.get("event") != Ev.REQUEUED_BY_SLURM or not isinstance(e.get("last_progress"), (int, float)):
        return None
    return (float(e["last_progress"]), e["time"]) if e["last_progress"] < e["time"] else None


def _in_job_fault(out: Goodput, evs: list[Event], nxt: Event, hang: Event | None) -> tuple[float, int]:
    """The last progress and the fault of a launch its supervisor started again (``nxt``:
    the next launch's ``relaunched``, whose ``cause`` says what the evidence showed: a node
    lost that was seen first as a hang is a node lost)."""
    lost = next((e for e in evs if e.get("event") == Ev.NODES_LOST), None)
    at = float(nxt.get("last_progress") or nxt["time"])
    if hang is not None:
        at = hang["time"] - float(hang.get("seconds", 0))
    if lost is not None and lost.get("why") == "straggler":
        stopped = next((e for e in evs if e.get("event") == Ev.STOPPED), None)
        return (stopped["time"] if stopped is not None else float(nxt.get("last_progress") or nxt["time"])), _fault(
            out, "straggler", nxt["time"], f"{lost.get('nodes')} replaced by {lost.get('spares')} at a checkpoint", True)
    # Events written before the supervisor said the cause: a hang, else a node lost, else a crash.
    cause = nxt.get("cause") or (eventlog.HANG if hang is not None else
                                 eventlog.NODE_LOST if lost is not None else eventlog.CRASH)
    hung = f"no progress for {hang.get('seconds')} s; {eventlog.hang_who(hang)}" if hang is not None else ""
    if cause == eventlog.LAUNCH_FAILED:  # nothing ran: the start-up is what it cost
        return at, _fault(out, eventlog.LAUNCH_FAILED, nxt["time"],
                          f"srun could not start the tasks on {nxt.get('nodes', '?')}; launched again", True)
    if cause == eventlog.NODE_LOST:
        seen = f"; seen first as a hang ({hung})" if hang is not None and nxt.get("seen_as") else ""
        nodes, spares = (lost or {}).get("nodes", "?"), (lost or {}).get("spares", "?")
        return at, _fault(out, eventlog.NODE_LOST, nxt["time"], f"node(s) {nodes} lost; in their place: {spares}{seen}",
                          True)
    # A node left out for failing or hanging twice is alive: the fault is what it did again.
    left = f"; node(s) {lost.get('nodes')} left out, in their place: {lost.get('spares')}" if lost is not None else ""
    if cause == eventlog.HANG and hang is not None:
        return at, _fault(out, eventlog.HANG, hang["time"], hung + left, True)
    return at, _fault(out, eventlog.CRASH, nxt["time"],
                      f"the program failed{' on ' + nxt['node'] if nxt.get('node') else ''} "
                      f"(exit status {nxt.get('exit_code')}){left}", True)


def _requeued_without(out: Goodput, evs: list[Event], e: Event, hang: Event | None) -> tuple[float, int]:
    """The last progress and the fault of a launch that lost nodes and ended the start
    (``e``: the supervisor's ``requeue`` or ``requeue_limit``, with the ``cause``)."""
    lost = next((x for x in evs if x.get("event") == Ev.NODES_LOST), None) or {}
    at = hang["time"] - float(hang.get("seconds", 0)) if hang is not None else e["time"]
    seen = (f"; seen first as a hang (no progress for {hang.get('seconds')} s)"
            if hang is not None and e.get("seen_as") else "")
    kind, nodes = str(e.get("cause")), lost.get("nodes", e.get("exclude", "?"))
    if kind == eventlog.NODE_LOST:
        detail = f"node(s) {nodes} lost, no spare left{seen}"
    else:  # alive, named twice: the fault is what it did again
        what = f"no progress for {hang.get('seconds')} s" if hang is not None else "the program failed"
        detail = f"{what}; node(s) {nodes} left out, no spare left"
    return at, _fault(out, kind, e["time"], detail, False, requeued=e.get("event") == Ev.REQUEUE)


def _stop_kind(evs: list[Event]) -> str | None:
    names = {e.get("event") for e in evs}
    if Ev.PREEMPTED in names:
        return "preempted"
    if (by := next((e for e in evs if e.get("event") == Ev.REQUEUED_BY_SLURM), None)) is not None:
        return eventlog.requeue_fault(by)  # the program saved and stopped
    if (sig := next((e for e in reversed(evs) if e.get("event") == Ev.SIGNAL), None)) is not None:
        return eventlog.signal_cause(sig)[0]  # the words eventlog's outcome says: one reading of a TERM
    return None


def _fault(out: Goodput, kind: str, at: float, detail: str, in_job: bool, requeued: bool = False) -> int:
    if not in_job and requeued:
        detail += "; requeued"
    out.faults.append(Fault(kind, at, detail, in_job))
    return len(out.faults) - 1


def _at(e: Event) -> float:
    """When it happened: ``first_step`` carries its heartbeat's own time (``at``)."""
    return float(e.get("at", e["time"]))


# ---- painting ------------------------------------------------------------------------

def _paint(claims: list[_Claim], begin: float, end: float, nodes: int) -> list[Span]:
    """``[begin, end]`` cut into spans, each second given to the highest-priority claim on
    it (``other`` where none): a sweep over the claims' edges, O(n log n)."""
    claims = [c for c in (_Claim(c.part, max(c.begin, begin), min(c.end, end), c.fault) for c in claims)
              if c.end > c.begin]
    edges = sorted({begin, end, *(c.begin for c in claims), *(c.end for c in claims)})
    by_begin = sorted(claims, key=lambda c: c.begin)
    live: list[tuple[int, int, _Claim]] = []  # (-priority, -order, claim): heap, highest first
    out: list[Span] = []
    i = 0
    for a, b in zip(edges, edges[1:]):
        while i < len(by_begin) and by_begin[i].begin <= a:
            c = by_begin[i]
            heapq.heappush(live, (-PRIORITY.index(c.part), -i, c))
            i += 1
        while live and live[0][2].end <= a:
            heapq.heappop(live)
        top = _top(live, a)
        part, fault = (top.part, top.fault) if top else ("other", None)
        if out and out[-1].part == part and out[-1].fault == fault and out[-1].end == a:
            out[-1] = Span(part, out[-1].begin, b, nodes, fault)
        else:
            out.append(Span(part, a, b, nodes, fault))
    return out


def _top(live: list[tuple[int, int, _Claim]], at: float) -> _Claim | None:
    """The highest claim still covering ``at`` (ended ones below the top are dropped lazily)."""
    while live and live[0][2].end <= at:
        heapq.heappop(live)
    return live[0][2] if live else None
