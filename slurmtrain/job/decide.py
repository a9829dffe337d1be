"""What to do, from what happened: pure functions, no Slurm, no clock, no files.

The supervisor gathers the facts (a signal, Slurm's answers, the launch's exit status,
the run's events) and asks here; the unit tests ask the same questions directly.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from .. import eventlog
from ..eventlog import Ev

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
    preempted: bool               # Slurm preempted the job, signalling only the tasks
    restarts: int                 # this start's restart count
    max_requeues: int
    requeue_always: bool          # resilience.requeue_when = "always"
    hung: bool = False            # the supervisor ended the launch: no rank reported progress
    down_nodes: tuple[str, ...] = ()  # ... and, then, the job's nodes that Slurm held down: a node failure


@dataclass(frozen=True)
class Verdict:
    action: str                   # "end" | "requeue" | "node_failure"
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
    return v.action == "end" and not v.outcome.startswith("finished") and v.outcome != "requeued from outside the job"


def failed_by_itself(f: Facts) -> bool:
    """The launch failed with no stop, cancel, preemption, Slurm requeue or `finished` to
    explain it: a rank died, or the supervisor ended a hung launch."""
    return not (f.status == 0 or f.program_finished or f.stop_requested or f.cancelled or f.slurm_requeued
                or f.preempted)


def relaunch(f: Facts, progressed: bool, repeated_error: bool, relaunches: int, budget: int) -> bool:
    """Start the launch again in this allocation? Only after a failure of the program itself
    (no stop, cancel, preemption or node failure Slurm handles; no `finished`) that followed
    a new checkpoint of this launch (else it would resume where it failed before), that is
    not the same error at the same step as an earlier launch's (a program error), within
    resilience.restarts_in_job."""
    if not failed_by_itself(f):
        return False
    if f.hung:  # no error line to repeat; the launch starts again from the newest checkpoint there is
        return relaunches < budget
    return progressed and not repeated_error and relaunches < budget


def after_launch(f: Facts) -> Verdict:
    """The launch ended: finished, failed, or stopped and requeued."""
    if f.status == 0:
        return Verdict("end", "finished", eventlog.EXIT_OK, [(Ev.FINISHED, {"exit_code": 0})])
    if f.program_finished:
        # The program said it is done; what the launchers did while tearing down after
        # it (a stop that came as it finished, an agent that lost the rendezvous store)
        # does not undo that.
        why = "as the stop request came" if f.stop_requested else "before its launcher exited"
        return Verdict("end", f"finished (the launch then exited with status {f.status})", 0,
                       [(Ev.FINISHED, {"exit_code": 0, "launch_exit": f.status})],
                       f"slurmtrain: the program finished {why} (launch exit status {f.status}); "
                       "the run is complete, not requeueing")
    if f.slurm_requeued and not f.down_nodes:
        return Verdict("end", "requeued from outside the job", f.status, [],
                       "slurmtrain: the job was requeued from outside it (`scontrol requeue` by an administrator or "
                       "another program; no node of the job is down); it resumes from its last checkpoint")
    if f.slurm_requeued:
        return Verdict("node_failure", "requeued by Slurm after a node failure", f.status, [],
                       "slurmtrain: a node of the job failed; Slurm has requeued the job, it resumes from its "
                       "last checkpoint")
    if f.cancelled:
        return Verdict("end", "cancelled", f.status, [], "slurmtrain: the job was cancelled; not requeueing")
    events: list[tuple[str, dict]] = []
    stopped, say = f.stop_requested, ""
    if not stopped and f.preempted:
        events.append((Ev.PREEMPTED, {"exit_code": f.status}))
        stopped, say = True, "slurmtrain: Slurm preempted the job (the tasks got SIGTERM)\n"
    if not stopped and f.hung:
        return Verdict("end", "hung; no in-job restart left", f.status, [(Ev.FAILED, {"exit_code": f.status})],
                       "slurmtrain: the launch hung and resilience.restarts_in_job is spent; not requeueing")
    if not stopped:
        return Verdict("end", "failed", f.status, [(Ev.FAILED, {"exit_code": f.status})],
                       f"slurmtrain: the command failed with exit status {f.status}; not requeueing "
                       "(a failure of the command itself)")
    if not f.requeue_always and f.status != eventlog.EXIT_STOPPED and not f.saved:
        return Verdict("end", "stopped; the program saved nothing, not requeued", f.status,
                       events + [(Ev.STOP_UNSAVED, {"exit_code": f.status})],
                       say + f"slurmtrain: stopped, but the program has reported no checkpoint in this run (exit "
                       f"{f.status}); not requeueing, it would start over (resilience.requeue_when = \"always\" "
                       "requeues anyway; docs/survival.md)")
    if f.restarts >= f.max_requeues:
        return Verdict("end", "stopped; requeue limit reached", eventlog.EXIT_REQUEUE_LIMIT,
                       events + [(Ev.REQUEUE_LIMIT, {"max_requeues": f.max_requeues})],
                       say + f"slurmtrain: stopped, but the requeue limit is reached (max_requeues={f.max_requeues})")
    return Verdict("requeue", "stopped after a checkpoint; requeued", f.status,
                   events + [(Ev.REQUEUE, {"exit_code": f.status})],
                   say + f"slurmtrain: stopped after a checkpoint (exit {f.status}); requeueing the job")
