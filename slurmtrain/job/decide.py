"""What to do, from what happened: pure functions, no Slurm, no clock, no files.

The supervisor gathers the facts (a signal, Slurm's answers, the launch's exit status,
the run's events) and asks here; the unit tests ask the same questions directly.
"""

from __future__ import annotations

import math
import signal
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import Enum
from typing import Union

from .. import eventlog, exits
from ..eventlog import Ev
from ..slurmtext import RELAUNCH_SAID

# Why a SIGTERM reached the supervisor (Slurm's preemption with a GraceTime signals the
# tasks only, and the stop signal is its own):
REQUEUED = "requeued"      # the job was requeued from outside the script: its restart count went up
TIME_LIMIT = "time_limit"  # the job's end is where it was planned: the time limit came
CANCEL = "cancel"          # anything else moves the end: scancel


def term_cause(restarts_now: int | None, restarts_at_start: int, end_at_start: str, end_now: str) -> str:
    if restarts_now is not None and restarts_now > restarts_at_start:
        return REQUEUED
    if end_at_start and end_at_start != "N/A" and end_now == end_at_start:
        return TIME_LIMIT
    return CANCEL


def end_at_start(end: str, wall: float) -> str:
    """squeue's end as read when the supervisor starts, or "" when it is not ahead of now: a
    cancel that came before the supervisor asked (a job cancelled as it started) has already
    moved it to the cancel's moment, and an end equal to it would make the cancel's SIGTERM
    read as the time limit. A job's planned end is at least its time limit away at its start."""
    t = _epoch(end)
    return end if t is None or t > wall else ""


def gate_rejects(nodes: list[str], answers: dict[str, str]) -> list[str]:
    """The preflight gate's verdict: a node that gave no answer, or one that differs from
    most nodes' (versions, GPU count), is left out."""
    common = Counter(answers[n] for n in nodes if n in answers).most_common(1)
    want = common[0][0] if common else None
    return [n for n in nodes if answers.get(n) != want or want is None]


@dataclass(frozen=True)
class Facts:
    """What is known when the launch has ended."""

    status: int                   # the launch's exit status (0: every task succeeded)
    stop_requested: bool          # the stop signal came (or Slurm's time-limit SIGTERM)
    program_finished: bool        # the program wrote `finished` since this start
    saved: bool                   # the program reported a checkpoint in this run (any start)
    slurm_requeued: bool          # a SIGTERM came because the job was requeued from outside the script
    cancelled: bool               # a SIGTERM came from scancel
    preempted: bool               # Slurm preempted the job, signalling only the tasks (with slurm_requeued:
                                  # and requeued it at the end of the GraceTime, the launch still running)
    restarts: int                 # the requeues so far that count toward max_requeues (eventlog.free_requeues)
    max_requeues: int
    requeue_always: bool          # resilience.requeue_when = "always"
    hung: bool = False            # the supervisor ended the launch: no rank reported progress
    down_nodes: tuple[str, ...] = ()  # ... and, then, the job's nodes that Slurm held down: a node failure
    stray_kill: bool = False      # Slurm's kill of an earlier start's step ended it (Record.stray_kill)
    progressed: bool = False      # this start saved past every checkpoint before it (eventlog.progressed_since_start)
    error: str | None = None      # what the program said of its failure in its failing node's log
    restarts_spent: int = 0       # resilience.restarts_in_job, when only its being spent kept the launch from starting again
    hung_again: bool = False      # hung at the step and ranks an earlier hang did, on other nodes (repeated_hang)
    program_stopped: bool = False  # the program wrote `stopped` in this launch (saved, and ending: a stop)
    stop_signal: int = 0          # the signal the supervisor asks the tasks to stop with (resilience.signal)


@dataclass(frozen=True)
class Verdict:
    action: str                   # "end" | "requeue" | "node_failure"
    kind: str                     # how the start ended: an eventlog.ENDINGS kind
    outcome: str                  # the summary line's words
    code: int                     # the batch step's exit status
    events: list[tuple[str, dict]] = field(default_factory=list)
    say: str = ""                 # a line for the batch log, before the summary


def launch_fault(hung: bool, dead: list[str]) -> dict[str, str]:
    """What ended a launch that failed by itself, once the node probe has answered: the
    ``cause`` (and ``seen_as``) fields of the events that say what follows (``relaunched``,
    ``nodes_lost``, ``requeue``), which goodput and ``status`` read. A node that died stalls
    its peers' collectives, so with a hang timeout shorter than the probe's wait its loss is
    seen first as a hang: the probe's answer is the cause, the hang only how it showed. A
    node left out for failing or hanging twice is alive: the fault is that hang or crash."""
    if dead:
        return {"cause": eventlog.NODE_LOST, **({"seen_as": eventlog.HANG} if hung else {})}
    return {"cause": eventlog.HANG if hung else eventlog.CRASH}


def ends_uncompleted(v: Verdict) -> bool:
    """The job ends for good and not as COMPLETED: a run queued ``--after`` it never starts."""
    return v.action == "end" and eventlog.ENDINGS[v.kind].state != "COMPLETED"


def failed_by_itself(f: Facts) -> bool:
    """The launch failed with no stop, cancel, preemption, Slurm requeue, `finished` or
    `stopped` to explain it: a rank died, or the supervisor ended a hung launch."""
    return not (f.status == 0 or f.program_finished or f.stop_requested or f.cancelled or f.slurm_requeued
                or f.preempted or f.program_stopped)


def progressed(mine: list[dict], memory_step: int | None) -> bool:
    """The launch (its events, ``mine``) made a new restart point: a checkpoint it reported,
    or a copy in node memory (``memory_step``, the newest this node holds) past the step it
    resumed from. A launch that crashes after a copy restarts from it, not where it failed."""
    if any(e.get("event") == Ev.CHECKPOINT_SAVED for e in mine):
        return True
    resumed = next((e.get("step") for e in mine if e.get("event") == Ev.RESUMED), 0)
    return memory_step is not None and isinstance(resumed, int) and memory_step > resumed


def relaunch(f: Facts, progressed: bool, repeated_error: bool, relaunches: int, budget: int) -> bool:
    """Start the launch again in this allocation? Only after a failure of the program itself
    (no stop, cancel, preemption or node failure Slurm handles; no `finished`) that followed
    a new checkpoint of this launch (else it would resume where it failed before), that is
    not the same error at the same step as an earlier launch's (a program error), within
    resilience.restarts_in_job. A hung launch, or one Slurm's stray kill ended, failed by
    no fault of the program: it starts again whether or not it saved; but a hang where the
    program hung before (``repeated_error``: repeated_hang) is the program's."""
    if not failed_by_itself(f):
        return False
    if f.stray_kill:  # no error of the program's; it starts again from the newest checkpoint
        return relaunches < budget
    if f.hung:  # nor is a hang, unless it comes again where one came before (repeated_hang)
        return not repeated_error and relaunches < budget
    return progressed and not repeated_error and relaunches < budget


# A program that exits 0 after the stop request without a word may have finished, or stopped
# early (the habit of saving on the signal and exiting 0): taken as finished, and said.
_EXIT_0_AFTER_STOP = ("slurmtrain: the command exited 0 after the stop request: taken as finished; a program that "
                      "stops early instead reports its checkpoint and exits 75 (slurmtrain.stop: docs/survival.md), "
                      "and the job is requeued")


def spent_budget(f: Facts, progressed: bool, repeated_error: bool, relaunches: int, budget: int) -> int:
    """``budget`` (resilience.restarts_in_job) where only its being spent keeps the launch
    from starting again here (relaunch, given one left, would); else 0. Said at the end."""
    return budget if relaunches >= budget and relaunch(f, progressed, repeated_error, 0, 1) else 0


def _hung(f: Facts) -> Verdict:
    """The launch hung and does not start again: the program's hang, or no restart left."""
    if f.hung_again:
        return Verdict("end", eventlog.HANG, "hung again where it hung before", f.status,
                       [(Ev.FAILED, {"exit_code": f.status, "hung_again": True})],
                       "slurmtrain: the launch hung again at the step and on the ranks it hung before, on other "
                       "nodes: the program's hang, not a node's; not requeueing (the stacks of each hang are in the "
                       "run's stacks/ folder)")
    return Verdict("end", eventlog.HANG, "hung; no in-job restart left", f.status, [(Ev.FAILED, {"exit_code": f.status})],
                   "slurmtrain: the launch hung and resilience.restarts_in_job is spent; not requeueing")


def _failed(f: Facts) -> Verdict:
    """The launch failed by itself and does not start again: the end of the run."""
    said = {"error": f.error} if f.error else {}
    spent = {"restarts_spent": f.restarts_spent} if f.restarts_spent else {}
    return Verdict("end", eventlog.USER_ERROR, "failed", f.status, [(Ev.FAILED, {"exit_code": f.status, **said, **spent})],
                   f"slurmtrain: the command failed with exit status {f.status}" + (f" ({f.error})" if f.error else "")
                   + (f"; resilience.restarts_in_job ({f.restarts_spent}) is spent: not requeueing"
                      if spent else "; not requeueing (a failure of the command itself)"))


def _succeeded(f: Facts) -> Verdict | None:
    """Every task exited 0: finished. Not a program that requeued its own job (Lightning's
    SLURM auto-requeue exits 0 as the job goes back to the queue), nor one that wrote
    `stopped` and exited 0, not 75 (a stop all the same), unless it said it is done."""
    if f.status != 0 or (not f.program_finished and (f.program_stopped or f.slurm_requeued)):
        return None
    unsaid = f.stop_requested and not f.program_finished  # finished, or stopped early without a word: said
    return Verdict("end", eventlog.COMPLETED, "finished", eventlog.EXIT_OK,
                   [(Ev.FINISHED, {"exit_code": 0, **({"after_stop": True} if unsaid else {})})],
                   _EXIT_0_AFTER_STOP if unsaid else "")


def after_launch(f: Facts) -> Verdict:
    """The launch ended: finished, failed, or stopped and requeued."""
    if (done := _succeeded(f)) is not None:
        return done
    if f.program_finished:
        # The program said it is done; what the launchers did while tearing down after
        # it (a stop that came as it finished, an agent that lost the rendezvous store)
        # does not undo that.
        why = "as the stop request came" if f.stop_requested else "before its launcher exited"
        return Verdict("end", eventlog.COMPLETED, f"finished (the launch then exited with status {f.status})", 0,
                       [(Ev.FINISHED, {"exit_code": 0, "launch_exit": f.status})],
                       f"slurmtrain: the program finished {why} (launch exit status {f.status}); "
                       "the run is complete, not requeueing")
    if f.slurm_requeued and f.preempted:  # requeued at the end of the preemption's GraceTime
        return Verdict("end", eventlog.PREEMPTED, "preempted; Slurm requeued the job at the end of its grace time",
                       eventlog.EXIT_OK, [], "slurmtrain: Slurm preempted the job and, the launch still running when the "
                       "partition's grace time ran out, killed it and requeued it; it resumes from its last checkpoint")
    if f.slurm_requeued and not f.down_nodes:
        return Verdict("end", eventlog.REQUEUED, "requeued from outside the job", f.status, [],
                       "slurmtrain: the job was requeued from outside it (`scontrol requeue` by an administrator, "
                       "another program, or the program itself, as Lightning's SLURM auto-requeue does; no node of "
                       "the job is down); it resumes from its last checkpoint")
    if f.slurm_requeued:
        return Verdict("node_failure", eventlog.NODE_FAILURE, "requeued by Slurm after a node failure", f.status, [],
                       "slurmtrain: a node of the job failed; Slurm has requeued the job, it resumes from its "
                       "last checkpoint")
    if f.cancelled:
        return Verdict("end", eventlog.CANCELLED, "cancelled", f.status, [], "slurmtrain: the job was cancelled; not requeueing")
    events: list[tuple[str, dict]] = []
    stopped, say = f.stop_requested, ""
    if not stopped and f.preempted:
        events.append((Ev.PREEMPTED, {"exit_code": f.status}))
        stopped, say = True, "slurmtrain: Slurm preempted the job (the tasks got SIGTERM)\n"
    if not stopped and f.program_stopped:  # a signal to its tasks from outside the job (scancel --signal)
        stopped, say = True, "slurmtrain: the program stopped after a checkpoint, asked by no one in the job\n"
    if not stopped and f.hung:
        return _hung(f)
    if not stopped:
        return _failed(f)
    if not f.requeue_always and f.status != eventlog.EXIT_STOPPED and not f.saved:
        return _stopped_unsaved(f, events, say)
    # A stop that is no preemption (the time limit's warning) after a start that moved the
    # run on is the run going on as planned: its requeue does not count, so a run longer than
    # its time limit is requeued for as long as each start saves something new.
    free = f.progressed and not f.preempted and f.max_requeues > 0
    if f.restarts >= f.max_requeues and not free:
        return Verdict("end", eventlog.REQUEUE_LIMIT, "stopped; requeue limit reached", eventlog.EXIT_REQUEUE_LIMIT,
                       events + [(Ev.REQUEUE_LIMIT, {"max_requeues": f.max_requeues})],
                       say + f"slurmtrain: stopped, but the requeue limit is reached (max_requeues={f.max_requeues})")
    return Verdict("requeue", eventlog.PREEMPTED if f.preempted else eventlog.TIME_LIMIT,
                   "stopped after a checkpoint; requeued", f.status,
                   events + [(Ev.REQUEUE, {"exit_code": f.status, **({"saved": True} if f.saved else {}),
                                           **({"counted": False} if free else {})})],
                   say + f"slurmtrain: stopped after a checkpoint (exit {f.status}); requeueing the job"
                   + (" (not counted toward max_requeues: this start saved a newer checkpoint)" if free else ""))


def killed_by_stop(f: Facts) -> str | None:
    """The name of the stop signal (resilience.signal) the program died of, when it did: it
    had no handler for it yet (still importing, say). Not SIGTERM: srun's own status after
    one is 143 too, and the supervisor's escalation sends it to a program that did not stop."""
    sig = exits.signal_of(f.status)
    if sig is None or sig != f.stop_signal or sig == signal.SIGTERM:
        return None
    return signal.Signals(sig).name.removeprefix("SIG")


def _stopped_unsaved(f: Facts, events: list[tuple[str, dict]], say: str) -> Verdict:
    """Stopped, and nothing saved in the whole run: not requeued (it would start over, for
    ever with a program that never saves)."""
    killed = killed_by_stop(f)
    if killed:
        why = (f"the program (or a shell in front of it) was killed by SIG{killed}, the stop signal (exit "
               f"{f.status}): it had no handler for it, none at all or none yet (slurmtrain.stop.install(), or the "
               "Lightning or Hugging Face callback, set up before heavy imports and data loading catches a stop that "
               "comes early; a wrapper script runs the program with exec); ")
    else:
        why = (f"the program has reported no checkpoint in this run (exit {f.status}); a program reports them "
               "through slurmtrain.stop; ")
    return Verdict("end", eventlog.STOPPED_UNSAVED, "stopped; the program saved nothing, not requeued",
                   f.status, events + [(Ev.STOP_UNSAVED, {"exit_code": f.status, **({"signal": killed} if killed
                                                                                   else {})})],
                   say + f"slurmtrain: stopped, but {why}not requeueing, it would start over "
                   "(resilience.requeue_when = \"always\" requeues anyway; docs/survival.md)")


def resumed_behind(before: list[dict], mine: list[dict], step: int | None) -> tuple[dict, str] | None:
    """A launch's first step is ``step``, below the newest checkpoint the run reported before
    it (eventlog.behind_checkpoint): the ``resumed_behind`` event's fields and the batch log's
    line; None where it resumed as it should, or said it did (a ``resumed`` at or past that
    checkpoint among the launch's events, ``mine``: a step count of its own may differ)."""
    saved = eventlog.behind_checkpoint(before, step) if step is not None else None
    if saved is None or any(e.get("event") == Ev.RESUMED and isinstance(e.get("step"), int)
                            and e["step"] >= saved["step"] for e in mine):
        return None
    path = saved.get("path")
    return ({"step": step, "saved": saved["step"], **({"path": path} if path else {})},
            f"slurmtrain: warning: the program's first step in this launch is {step}, but the run saved step "
            f"{saved['step']}" + (f" ({path})" if path else "") + ": it did not resume from its newest checkpoint "
            "and trains those steps again (a checkpoint folder named by job id, such as Lightning's version_<job>, "
            "is not found after a requeue or resubmit: resume from the run's own folder, "
            "slurmtrain.stop.lightning.resume_from or slurmtrain.stop.hf.resume_from; docs/survival.md)")


# ---- the supervisor's state machine ----------------------------------------------------
#
# One start of the job is a walk through Phase (where the task's step is) while Stop (how far
# the stop window has gone) moves beside it: a stop can come in any phase that takes signals.
# ``step`` is the only place either changes; the supervisor observes, feeds, and does what it
# is told (docs/supervisor.md draws both).

TERM_GRACE_S = 15      # after a SIGTERM that should end a step: the grace before SIGKILL
STUCK_S = 15           # srun still runs this long after a task failed: probe the launch's nodes for a dead one
# How long after the moment Slurm's time-limit warning was due the supervisor stops the run
# itself when none came (Slurm sends it on a 30-second tick, up to that much early).
WARNING_LATE_S = 10
# Slurm sends the time-limit warning on its 30-second tick, so up to a minute early: a stop
# signal well before that is not Slurm's warning but someone's (scancel --signal, a site's).
WARNING_EARLY_S = 180


class Phase(str, Enum):
    STARTING = "starting"      # the requeue limit, the node list, `started`
    GATE = "gate"              # the preflight gate's step runs
    JOINING = "joining"        # the launch runs; not every node has run its setup lines yet
    RUNNING = "running"        # every node joined: hangs, stuck sruns, stragglers, the warning watched
    ENDING = "ending"          # the supervisor ends the launch: a hang, a dead node, a failed start-up
    SETTLING = "settling"      # the launch is over: relaunch here, requeue, or end
    REQUEUING = "requeuing"    # Slurm is asked to requeue the job; its SIGTERM for that is expected
    DONE = "done"              # this start is over


class Stop(str, Enum):
    NONE = "none"
    ASKED = "asked"            # the stop signal went to every task: checkpoint and stop
    TERMED = "termed"          # stop_timeout later: SIGTERM to the tasks
    KILLED = "killed"          # TERM_GRACE_S later: SIGTERM to srun, which SIGKILLs them


EDGES: frozenset[tuple[str, str]] = frozenset({
    (Phase.STARTING, Phase.GATE), (Phase.STARTING, Phase.JOINING), (Phase.STARTING, Phase.DONE),
    (Phase.GATE, Phase.JOINING), (Phase.GATE, Phase.REQUEUING),
    (Phase.JOINING, Phase.RUNNING), (Phase.JOINING, Phase.ENDING),
    (Phase.RUNNING, Phase.ENDING), (Phase.RUNNING, Phase.SETTLING),
    (Phase.ENDING, Phase.SETTLING), (Phase.ENDING, Phase.DONE),
    (Phase.SETTLING, Phase.JOINING), (Phase.SETTLING, Phase.REQUEUING), (Phase.SETTLING, Phase.DONE),
    (Phase.REQUEUING, Phase.DONE),
    (Stop.NONE, Stop.ASKED), (Stop.ASKED, Stop.TERMED), (Stop.TERMED, Stop.KILLED),
    (Stop.ASKED, Stop.NONE), (Stop.TERMED, Stop.NONE), (Stop.KILLED, Stop.NONE),
})
WATCHING = (Phase.GATE, Phase.JOINING, Phase.RUNNING, Phase.ENDING)  # the phases that take signals
LAUNCHED = (Phase.JOINING, Phase.RUNNING, Phase.ENDING)              # ... with the task's step running


@dataclass(frozen=True)
class Knobs:
    """What ``step`` needs of the job script's settings."""

    stop_signal: str = "USR2"      # its name, without SIG
    stop_timeout: float = 90
    rendezvous_timeout: float = 60
    warning_seconds: int = 0


@dataclass(frozen=True)
class State:
    """Everything the supervisor's decisions read that changes during a start."""

    knobs: Knobs = Knobs()
    phase: Phase = Phase.STARTING
    stop: Stop = Stop.NONE
    now: float = 0.0               # the clock's (monotonic) seconds at the last Tick
    wall: float = 0.0              # ... and wall-clock seconds (file times, the job's end)
    deadline: float = math.inf     # GATE: its SIGTERM; JOINING: the start-up watchdog; RUNNING: the probe
                                   # if no rank has stepped by then; ENDING: SIGKILL
    stop_at: float | None = None
    term_at: float | None = None
    replacing: str | None = None   # the straggler the supervisor's own stop puts out of the launch
    slurm_requeued: bool = False   # a SIGTERM came for a requeue from outside the script
    cancelled: bool = False        # a SIGTERM came from scancel
    hung: bool = False             # this launch hung: the supervisor ended it
    failed_at: float | None = None # when srun reported this launch's first task error
    probed: bool = False           # ... and the probe that follows it went out
    start_probed: bool = False     # RUNNING's deadline passed with no heartbeat: the nodes were probed
    dead: tuple[str, ...] = ()     # ... and the nodes it found dead
    missing: tuple[str, ...] = ()  # the start-up watchdog ended this launch: the nodes that did not join
    setup_failed: tuple[str, ...] = ()  # ... and those whose setup line failed, as seen before the end
    planned_end: str = ""          # the end a time-limit warning is expected before ("": none, or said)
    launch: int = 0                # this start's launches so far (0: before the first)
    relaunches: int = 0            # ... of them in-job restarts after a failure (resilience.restarts_in_job)
    code: int | None = None        # DONE: the batch step's exit status


# What the supervisor observes and feeds to ``step``.
@dataclass(frozen=True)
class Tick:
    now: float
    wall: float


@dataclass(frozen=True)
class Began:
    """The start is under way (``started`` written); ``gate``: resilience.preflight."""
    gate: bool
    planned_end: str


@dataclass(frozen=True)
class Sig:
    name: str                      # without SIG: "TERM", "USR2", "CHLD"


@dataclass(frozen=True)
class TermCause:
    """The answer to ``ask_term_cause``: why the SIGTERM came (REQUEUED, TIME_LIMIT, CANCEL)."""
    cause: str


@dataclass(frozen=True)
class EndTime:
    """The answer to ``ask_end_time``: the job's end as Slurm plans it now."""
    text: str


@dataclass(frozen=True)
class GateAnswered:
    bad: tuple[str, ...]           # the nodes the gate rejects (gate_rejects)
    spares_cover: bool             # the pool's spares can take their place


@dataclass(frozen=True)
class Arrivals:
    missing: tuple[str, ...]       # the launch's nodes that have not run their setup lines
    failed: tuple[str, ...]        # ... those whose setup line failed
    exited: bool                   # the launch has ended
    job_state: str = ""            # Slurm's JobState, asked when it ended so with no setup failure


@dataclass(frozen=True)
class TaskFailed:
    """srun wrote this launch's first task error."""


@dataclass(frozen=True)
class Hung:
    """The heartbeats say the launch hangs (hangs.HangWatch)."""
    hang: object


@dataclass(frozen=True)
class Probed:
    dead: tuple[str, ...]          # the answer to ``probe``: the launch's nodes that do not answer


@dataclass(frozen=True)
class Lagging:
    """A straggler named (stragglers.py); ``spare``: an idle spare could take its place."""
    straggler: object
    spare: bool


@dataclass(frozen=True)
class Beats:
    """The heartbeats' verdict on a running launch: a hang (hangs.Hang), or None; and
    whether any rank has stepped (beaten) yet in this launch."""
    hang: object = None
    stepping: bool = True
    stopped: tuple[float, int] | None = None  # (wall-clock time, step) the program said `stopped` in this launch


@dataclass(frozen=True)
class Due:
    """The round's last look: deadlines, the stop window, the time-limit warning."""


@dataclass(frozen=True)
class Exited:
    status: int                    # the step's exit status


@dataclass(frozen=True)
class Settled:
    """What follows the launch: ``"relaunch"`` here (``"replace"``: with a straggler put
    out), ``"requeue"`` the job (``args``: the ``requeue`` action's)."""
    next: str
    args: tuple = ()


@dataclass(frozen=True)
class Over:
    """This start is over: ``outcome`` for the summary line (None: printed already)."""
    outcome: str | None
    code: int


@dataclass(frozen=True)
class Do:
    """An action for the supervisor: ``what`` names its method ``do_<what>``, ``args`` its arguments."""
    what: str
    args: tuple = ()


Observation = Union[Tick, Began, Sig, TermCause, EndTime, GateAnswered, Arrivals, TaskFailed, Hung, Probed,
                    Lagging, Beats, Due, Exited, Settled, Over]


def step(s: State, o: Observation) -> tuple[State, list[Do]]:
    """The next state and what to do, from the state and one observation."""
    if isinstance(o, Tick):
        return replace(s, now=o.now, wall=o.wall), []
    if isinstance(o, (Sig, TermCause, EndTime)):
        return _signal(s, o) if s.phase in WATCHING else (s, [])
    if isinstance(o, Over):
        return _go(s, Phase.DONE, code=o.code), [Do("end", (o.outcome, o.code))]
    handler = _HANDLERS.get((s.phase, type(o)))
    if handler is None:
        raise ValueError(f"no transition from {s.phase.value} on {type(o).__name__}")
    return handler(s, o)


def _go(s: State, phase: Phase | None = None, stop: Stop | None = None, **fields) -> State:
    """``s`` moved to ``phase``/``stop``: only along EDGES."""
    for old, new in ((s.phase, phase), (s.stop, stop)):
        if new is not None and new != old and (old, new) not in EDGES:
            raise ValueError(f"no transition {old.value} -> {new.value}")
    return replace(s, phase=phase or s.phase, stop=stop or s.stop, **fields)


def _say(text: str) -> Do:
    return Do("say", (text,))


def _event(name: str, **fields) -> Do:
    return Do("event", (name, fields))


def _began(s: State, o: Began) -> tuple[State, list[Do]]:
    s = replace(s, planned_end=o.planned_end)
    if o.gate:
        return _go(s, Phase.GATE, deadline=s.now + s.knobs.rendezvous_timeout), [Do("start_gate")]
    return _launch(s)


def _launch(s: State) -> tuple[State, list[Do]]:
    """A launch starts: its watch afresh; a stop that came before it (in the gate) passed on."""
    s = _go(s, Phase.JOINING, deadline=s.now + s.knobs.rendezvous_timeout, hung=False, failed_at=None,
            probed=False, start_probed=False, dead=(), missing=(), setup_failed=(), launch=s.launch + 1)
    return s, [Do("start_launch")] + ([Do("send_stop")] if s.stop != Stop.NONE else [])


def _gate_answered(s: State, o: GateAnswered) -> tuple[State, list[Do]]:
    """resilience.preflight: the nodes it rejects are left out, by the spares here or by a requeue."""
    if not o.bad:
        s, acts = _launch(s)
        return s, [Do("gate_passed")] + acts
    if o.spares_cover:
        s, acts = _launch(s)
        return s, [Do("gate_failed", (o.bad, True))] + acts
    names = " ".join(o.bad)
    return _go(s, Phase.REQUEUING), [Do("gate_failed", (o.bad, False)),
                                     Do("requeue_without", (o.bad, f"preflight failed on {names}", "preflight"))]


def _arrivals(s: State, o: Arrivals) -> tuple[State, list[Do]]:
    """The start-up watchdog: every node joined, or a setup line failed, the launch ended
    with nodes missing, or rendezvous_timeout passed (ended: exit 4 once it is over)."""
    if not o.missing:  # a node that dies now leaves its peers waiting in the rendezvous: probed below
        return _go(s, Phase.RUNNING, deadline=s.now + s.knobs.rendezvous_timeout), []
    if not o.failed and not o.exited and s.now < s.deadline:
        return s, []
    if o.exited and not o.failed and o.job_state not in ("", "RUNNING"):
        return _refused(s, o.job_state)
    return _end_launch(s, missing=o.missing, setup_failed=o.failed)


def _refused(s: State, job_state: str) -> tuple[State, list[Do]]:
    """srun ended before the nodes joined because the job itself is ending (a cancel that came
    as the launch started: srun says the job "has expired" before the SIGTERM reaches us). No
    node is to blame; the launch is settled as any other, a cancel as a cancel."""
    acts = [_say(f"slurmtrain: srun ended before the nodes joined: the job is {job_state} in Slurm")]
    if job_state == "CANCELLED" and not s.cancelled:
        s, acts = replace(s, cancelled=True), acts + [_event(Ev.CANCELLED)]
    s, more = _end_launch(s)
    return s, acts + more


# The longest a launch may run on after the program said `stopped` (its checkpoint written)
# to a stop from outside the job, less where stop_timeout is: closing the process group and
# the launcher's own exit. Short: the GraceTime began before the checkpoint did.
LINGER_S = 30


def _end_launch(s: State, **fields) -> tuple[State, list[Do]]:
    """The supervisor ends the launch: SIGTERM to srun (it SIGKILLs its tasks), SIGKILL to an
    srun that outlives TERM_GRACE_S."""
    return _go(s, Phase.ENDING, deadline=s.now + TERM_GRACE_S, **fields), [Do("send_step", ("TERM",))]


def _beats(s: State, o: Beats) -> tuple[State, list[Do]]:
    """A hang ends the launch; else, STUCK_S after a task failed with srun still running, the
    launch's nodes are probed once: srun waits for a dead node until Slurm marks it down."""
    if s.stop != Stop.NONE:
        return s, []
    wait = min(s.knobs.stop_timeout, LINGER_S)
    if o.stopped is not None and s.wall >= o.stopped[0] + wait:
        # A stop from outside the job (a preemption's SIGTERM reaches the tasks only): a launch
        # that outlives it runs into the partition's GraceTime, where Slurm kills the job.
        step = o.stopped[1]
        s, acts = _end_launch(s)
        return s, [_say(f"slurmtrain: the program stopped after its checkpoint of step {step}, but its launch is "
                        f"still running {wait:g} s later; ending it"),
                   _event(Ev.STOP_LINGERED, seconds=wait, step=step)] + acts
    if o.hang is not None:
        s, acts = _end_launch(s, hung=True)
        return s, [Do("record_hang", (o.hang,))] + acts
    if s.failed_at is not None and not s.probed and s.now >= s.failed_at + STUCK_S:
        return replace(s, probed=True), [Do("probe")]
    if not o.stepping and not s.start_probed and s.now >= s.deadline:
        return replace(s, start_probed=True), [Do("probe")]
    return s, []


def _probed(s: State, o: Probed) -> tuple[State, list[Do]]:
    """A dead node ends the launch (its peers would wait for it until Slurm marks it down)."""
    waited = (f"a task failed {STUCK_S} s ago and srun still waits" if s.failed_at is not None else
              f"no heartbeat from any rank {s.knobs.rendezvous_timeout:g} s after every node joined")
    if not o.dead:
        return s, ([] if s.failed_at is not None else
                   [_say(f"slurmtrain: {waited}; every node answers (a long load, or a program that sends "
                         "none): waiting")])
    s, acts = _end_launch(s, dead=o.dead)
    return s, [_say(f"slurmtrain: {waited}: node(s) {' '.join(o.dead)} do not answer; ending the launch")] + acts


def _lagging(s: State, o: Lagging) -> tuple[State, list[Do]]:
    """A straggler is named; with a spare idle and no stop under way, the launch stops at a
    checkpoint and starts again with the spare in its place."""
    node = o.straggler.node
    if not (o.spare and s.stop == Stop.NONE):
        return s, [Do("report_straggler", (o.straggler, False))]
    s = _go(s, stop=Stop.ASKED, stop_at=s.now, replacing=node)
    return s, [Do("report_straggler", (o.straggler, True)), Do("touch_stop_file"), Do("send_stop")]


def _exited(s: State, o: Exited) -> tuple[State, list[Do]]:
    if s.missing:  # Over follows, or a launch again (srun could not reach a node a moment)
        return _go(s, Phase.SETTLING), [Do("start_up_failed", (s.missing, s.setup_failed))]
    return _go(s, Phase.SETTLING), [Do("settle", (o.status,))]


def _settled(s: State, o: Settled) -> tuple[State, list[Do]]:
    if o.next in ("relaunch", "replace"):
        return _launch(_go(s, stop=Stop.NONE, stop_at=None, term_at=None, replacing=None,
                           relaunches=s.relaunches + (o.next == "relaunch")))
    return _go(s, Phase.REQUEUING), [Do(o.next, o.args)]


def _due(s: State, o: Due) -> tuple[State, list[Do]]:
    if s.phase in (Phase.GATE, Phase.ENDING):
        if s.now < s.deadline:
            return s, []
        return replace(s, deadline=math.inf), [Do("send_step", ("TERM" if s.phase == Phase.GATE else "KILL",))]
    s, acts = _escalate(s)
    if s.stop == Stop.NONE and warning_due(s):
        acts.append(Do("ask_end_time"))
    return s, acts


def _escalate(s: State) -> tuple[State, list[Do]]:
    """stop_timeout after the stop: SIGTERM to the tasks (through Slurm: SIGTERM to srun
    itself would SIGKILL them at once); TERM_GRACE_S later, SIGKILL (SIGTERM to srun)."""
    k = s.knobs
    if s.stop == Stop.ASKED and s.stop_at is not None and s.now >= s.stop_at + k.stop_timeout:
        return _go(s, stop=Stop.TERMED, term_at=s.now), [
            _say(f"slurmtrain: tasks still running {k.stop_timeout} s after the stop request; sending them SIGTERM"),
            _event(Ev.STOP_TIMEOUT, seconds=k.stop_timeout), Do("signal_steps", ("TERM",))]
    if s.stop == Stop.TERMED and s.term_at is not None and s.now >= s.term_at + TERM_GRACE_S:
        # Not scancel --signal=KILL: Slurm takes that as cancelling the whole job.
        return _go(s, stop=Stop.KILLED), [
            _say(f"slurmtrain: tasks still running {TERM_GRACE_S} s after SIGTERM; killing them"),
            _event(Ev.STOP_ESCALATED, seconds=TERM_GRACE_S), Do("send_step", ("TERM",))]
    return s, []


def warning_due(s: State) -> bool:
    """Slurm's time-limit warning (``--signal=B:<stop>@warning_seconds``) is WARNING_LATE_S
    overdue. Slurm 24.11 on the sandbox once sent none, and the job ran into its limit unwarned
    and unsaved. Not past the end either: an end already behind is no time limit to warn of (a
    clock off, a stand-in Slurm); Slurm's own TERM comes then."""
    end = _epoch(s.planned_end)
    if not s.knobs.warning_seconds or end is None:
        return False
    return end - s.knobs.warning_seconds + WARNING_LATE_S <= s.wall < end


def _signal(s: State, o: Sig | TermCause | EndTime) -> tuple[State, list[Do]]:
    """A signal, and the answers asked to tell what it means. A SIGTERM during our own requeue
    never gets here (REQUEUING takes no signals)."""
    if isinstance(o, EndTime):  # asked again before acting: a limit raised meanwhile moves the end
        if o.text and o.text != s.planned_end:
            return replace(s, planned_end=o.text), []
        k = s.knobs
        said = _say(f"slurmtrain: Slurm's time-limit warning (SIG{k.stop_signal} {k.warning_seconds} s before the "
                    f"end at {o.text or s.planned_end}) has not come; stopping as if it had")
        t, acts = _stop(replace(s, planned_end=""), k.stop_signal)  # once
        return t, [said] + acts
    if isinstance(o, Sig) and o.name == "CHLD":
        return s, []  # a child ended (srun, or a Slurm command): it only woke the loop
    if isinstance(o, Sig) and o.name == "TERM":
        return s, ([] if s.slurm_requeued or s.cancelled else [Do("ask_term_cause")])
    if isinstance(o, TermCause):
        if o.cause == REQUEUED:
            return replace(s, slurm_requeued=True), [Do("note_requeue", (False,))]
        if o.cause == CANCEL:
            return replace(s, cancelled=True), [_event(Ev.CANCELLED)]
    if s.stop != Stop.NONE and s.replacing is None:
        return s, []  # the stop goes on (the time limit came during the stop window)
    # A stop of Slurm's during the supervisor's own (a straggler's replacement): Slurm's now.
    return _stop(replace(s, replacing=None), "TERM" if isinstance(o, TermCause) else o.name)


def _stop(s: State, name: str) -> tuple[State, list[Do]]:
    """Every task is asked to checkpoint and stop. What a stop signal means is decided here,
    where it came: a SIGTERM reaches this point only at the planned end, the stop signal is
    the time limit's warning, Slurm's or the supervisor's own."""
    s = _go(s, stop=Stop.ASKED if s.stop == Stop.NONE else None, stop_at=s.now)
    acts = [Do("touch_stop_file"), _event(Ev.SIGNAL, signal=name, **_stop_cause(s, name)),
            _say(f"slurmtrain: received SIG{name}; asking every task to checkpoint and stop")]
    return s, acts + ([Do("send_stop")] if s.phase in LAUNCHED else [])


def _stop_cause(s: State, name: str) -> dict:
    """The time limit's, unless the stop signal came well before its warning was due: then
    someone asked for the stop (``before_end``: seconds left to the planned end)."""
    end = _epoch(s.planned_end)
    if name == "TERM" or end is None or not s.knobs.warning_seconds \
            or s.wall >= end - s.knobs.warning_seconds - WARNING_EARLY_S:
        return {"cause": eventlog.TIME_LIMIT}
    return {"cause": eventlog.STOP_ASKED, "before_end": round(end - s.wall)}


def _epoch(end: str) -> float | None:
    """Seconds since the epoch of squeue's end time ("2026-11-25T02:10:21", local), else None."""
    try:
        return datetime.fromisoformat(end).timestamp()
    except ValueError:
        return None  # "", "N/A", "Unknown": no limit to warn of


_HANDLERS = {
    (Phase.STARTING, Began): _began,
    (Phase.GATE, GateAnswered): _gate_answered,
    (Phase.GATE, Due): _due,
    (Phase.JOINING, Arrivals): _arrivals,
    (Phase.JOINING, Due): _due,
    (Phase.RUNNING, TaskFailed): lambda s, o: (replace(s, failed_at=s.now) if s.failed_at is None else s, []),
    (Phase.RUNNING, Beats): _beats,
    (Phase.RUNNING, Probed): _probed,
    (Phase.RUNNING, Lagging): _lagging,
    (Phase.RUNNING, Exited): _exited,
    (Phase.RUNNING, Due): _due,
    (Phase.ENDING, Exited): _exited,
    (Phase.ENDING, Due): _due,
    (Phase.SETTLING, Settled): _settled,
}


LAUNCH_RETRY_S = 5.0   # after srun could not start the tasks on a node: its link or slurmd back (doubled each time)


def launch_again_in(unreached: bool, setup_failed: bool, relaunches: int, budget: int, tries: int) -> float | None:
    """The launch ended before every node joined: the seconds to wait before launching again
    where srun could not start the tasks on a node (nothing ran there: a link down a moment,
    a slurmd restarting) and no setup line failed, while resilience.restarts_in_job lasts;
    doubled at each of this start's ``tries`` (a link that flaps is not met in step). None:
    the start-up failed."""
    if not unreached or setup_failed or relaunches >= budget:
        return None
    return LAUNCH_RETRY_S * 2 ** tries


# ---- after the launch: decisions the supervisor takes once it has asked ------------------

def whose_requeue(action: str, preempted: bool, slurm_requeues_preempted: bool) -> str | None:
    """Who requeues the job after this end: "slurm" (it requeues a preempted job itself when
    the script ends, Slurm 24.05+: ours as well would start the job once more), "ours", or
    None (no requeue: see :func:`forbids_requeue`)."""
    if action != "requeue":
        return None
    return "slurm" if preempted and slurm_requeues_preempted else "ours"


def forbids_requeue(code: int, requeued: bool, preempted: bool) -> bool:
    """At an end for good with exit status ``code``: must Slurm 24.05+ be told not to requeue
    the job? It requeues a job it preempted (``preempted``: in this start or an earlier one;
    the mark stays through a requeue) when the script ends. Only for an uncompleted end:
    Requeue=0 makes Slurm end the job PREEMPTED, which no ``--dependency=afterok`` takes, and
    the start Slurm makes of a completed job ends at once (Requeue.completed_before); nor for a job
    queued again already (``requeued``)."""
    return code != eventlog.EXIT_OK and not requeued and preempted


def after_requeue_excluding(ok: bool, held: bool) -> str:
    """The requeue that leaves the ledger's nodes out ended: "done"; "held" (the hold went
    through, the release did not: requeued but held, say how to release it); or "plain": ask
    again with the job's node list as it is."""
    return "done" if ok else "held" if held else "plain"


def after_requeue(ok: bool, went_through: bool, text: str) -> str:
    """A plain requeue ended: "done" (its answer, or Slurm's restart count, says so), "already"
    (pending already: Slurm after a node failure, or someone), or "failed"."""
    if ok or went_through:
        return "done"
    return "already" if "pending execution" in text else "failed"


def blamed(named: list[str], active: list[str], blame: bool) -> list[str]:
    """The nodes a failed launch counts against: those named (the first to fail, the last to
    report before a hang) among the launch's; none when ``blame`` is off (the same training
    error at the same step is the program's), nor when a hang names every node (ranks in
    lockstep beat within the same second: it says nothing of one)."""
    if not blame or set(active) <= set(named):
        return []
    return [n for n in named if n in active]


def repeated_hang(mine: list[dict], run: list[dict]) -> bool:
    """This launch's hang (among its events, ``mine``) came at the step, with the same ranks
    last to report, as an earlier hang of the run (``run``: its events, these included) on
    other nodes: a program that hangs where it hung before after its ranks moved (a spare in
    a node's place, a requeue without one) hangs by itself; no node is to blame. On the same
    nodes it may be theirs: a fault that replays with the steps (a port that stalls the first
    all-reduce after each restart), so twice there still names them."""
    hang = next((e for e in reversed(mine) if e.get("event") == Ev.HANG), None)
    if hang is None:
        return False
    key, nodes = (hang.get("step"), hang.get("ranks")), set(str(hang.get("nodes") or "").split())
    return any(e.get("time") != hang.get("time") and e.get("event") == Ev.HANG and (e.get("step"), e.get("ranks")) == key
               and set(str(e.get("nodes") or "").split()) != nodes for e in run)


def repeated_error(mine: list[dict], this_start: list[dict], said: str | None = None) -> bool:
    """This launch's training error (among its events, ``mine``) is one an earlier launch of
    this start had, at the same step (``this_start``: the start's events, these included);
    or, for any program, what it said of its failure in its failing node's log (``said``:
    the supervisor's reading, none for a node's own fault) is what an earlier in-job restart
    of this start was for: the same failure again is the program's, not its node's."""
    if said and any(e.get("event") == Ev.RELAUNCHED and e.get("error") == said for e in this_start):
        return True
    errors = [e for e in mine if e.get("event") == Ev.TRAIN_ERROR]
    if not errors:
        return False
    key = (errors[-1].get("step"), errors[-1].get("error"))
    return sum(1 for e in this_start if e.get("event") == Ev.TRAIN_ERROR
               and (e.get("step"), e.get("error")) == key) > 1


def go_on_here(spares_cover: bool, relaunches: int, budget: int) -> bool:
    """Nodes were lost: go on in this allocation (spares in their place, an in-job restart
    left), else requeue without them."""
    return spares_cover and relaunches < budget


@dataclass(frozen=True)
class AfterFailure:
    """What follows a launch's end (no straggler's replacement under way): ``action`` is
    "relaunch" (in this allocation), "requeue_without" (the lost nodes) or "finish" (decide
    as after any launch: :func:`after_launch`)."""

    action: str
    why: str = ""     # a relaunch's cause for its event: "nodes lost", "stray kill", "" (a new checkpoint)
    words: str = ""   # the reason in words: a relaunch's ("as node(s) n2 were lost"), a requeue's


def after_failure(f: Facts, lost: list[str], seen_as_hang: bool, spares_cover: bool, progressed: bool,
                  repeated: bool, relaunches: int, budget: int) -> AfterFailure:
    """Nodes ``lost`` (dead or named twice) go out: with spares to cover them and an in-job
    restart left the launch starts again here, else the job is requeued without them.
    Without a lost node: :func:`relaunch` decides."""
    names = " ".join(lost)
    if lost and not go_on_here(spares_cover, relaunches, budget):
        seen = " (seen first as a hang)" if seen_as_hang else ""
        return AfterFailure("requeue_without", words=f"node(s) {names} lost{seen}")
    if lost:
        return AfterFailure("relaunch", "nodes lost", f"as node(s) {names} were lost")
    if not relaunch(f, progressed, repeated, relaunches, budget):
        return AfterFailure("finish")
    if f.stray_kill:
        return AfterFailure("relaunch", "stray kill", "as Slurm killed it (its kill of an earlier start's step)")
    return AfterFailure("relaunch", words="after a new checkpoint")


def relaunch_said(then: AfterFailure, f: Facts, node: str | None, attempt: int, budget: int,
                  active: list[str]) -> tuple[str, dict]:
    """The batch log's line and the ``relaunched`` event's fields for an in-job restart
    (``node``: where the launch failed or hung first, where that is known)."""
    where, status = (f" on {node}" if node else ""), (f"{f.status}: {f.error}" if f.error else f"{f.status}")
    what = (f"the launch hung{where} and was ended (exit status {status})" if f.hung else
            f"the program failed{where} (exit status {status}) {then.words}")
    fields = {"attempt": attempt, "exit_code": f.status, **({"why": then.why} if then.why else {}),
              **({"node": node} if node else {}), **({"error": f.error} if f.error else {})}
    return (f"slurmtrain: {what}{RELAUNCH_SAID} on {' '.join(active)} ({attempt} of {budget})",
            fields)


def replacement_goes_on(f: Facts, preempted: bool) -> bool:
    """After the supervisor's stop to replace a straggler: the spare takes its place, unless
    the program finished or Slurm ended the job meanwhile (a cancel, a requeue, a preemption,
    whose SIGTERM reached only the tasks): then decide as after any launch."""
    return not (f.program_finished or f.cancelled or f.slurm_requeued or preempted)
