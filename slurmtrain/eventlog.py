"""What a run's ``events.jsonl`` says: the event names, the split into starts, and how
each start ended. The one owner of that meaning: ``runs/classify.py`` (``status``'s
outcome and history), ``runs/track.py`` (the state once Slurm forgets a job),
``train/progress.py`` (``watch``) and the job's supervisor (``slurmtrain/job``, which
asks :func:`finished_since_start`/:func:`saved_in_run` after the launch) ask this module.

Starts. One job id can run many times (each requeue starts the batch script again with
``restart`` one higher), and ``slurmtrain resubmit`` continues a run in a new job. A
:class:`Start` is one run of the batch script: it opens with the script's ``started``
(joined to the ``submitted``/``resubmitted`` just before it), or, while the job waits,
with ``submitted``/``resubmitted`` alone. Events before any of them (a program run
outside a job, with no script) make a start without a script. Events are taken in file
order, which is the order the writers appended them in: the job's supervisor decides
by that order, and the clocks of different hosts need not agree.

Job arrays. The N tasks of an array job (``slurmtrain tokenize --profile``) share one
run directory, and their events interleave in one file. Every line a task's script
writes names the task (``array_task``, with ``array_job_id``: the array's id, which the
manifest records, beside ``job_id``: the task's own); so do its program's (through
``slurmtrain.events``); the script's ``started`` and the CLI's ``submitted`` say how
many tasks there are (``array_tasks``). Each task is read by itself (:func:`tasks`,
:func:`of_task`): its own events and those naming no task (the CLI's ``submitted``,
``cancel_requested``), split into starts as above, so a task's ``started``..``finished``
is never another's. The supervisor of task k asks its two questions of task k's events.

How a start ended, the first that applies:

==========================================  ============================================
events of the start                         outcome
==========================================  ============================================
the script's ``finished``                   completed
``watchdog_timeout`` (+ ``setup_failed``)   watchdog (a node never joined, or its setup failed)
``requeue_limit``                           requeue limit (with the cause of the stop)
``cancel_requested`` or ``cancelled``       cancelled
``requeued_by_slurm``                       node failure, requeued by Slurm (a ``failed``
                                            the dying script writes after it is no end);
                                            by its ``by``: requeued (``scontrol requeue``),
                                            preempted (the GraceTime ran out)
``stop_unsaved``                            stopped, nothing saved: not requeued
``failed`` after a ``hang`` of its launch     hang (no in-job restart left)
``failed`` (+ ``train_error``)              user error (the command failed by itself)
``requeue`` (+ ``requeue_failed``)          preempted / time limit / node failure, by
                                            the stop's cause; requeued (or not: refused)
none, and a later start exists              node failure (the script was killed)
none: ``submitted`` only                    running (waiting to start)
none, no script: the program's ``finished`` completed (``train_error``: user error)
==========================================  ============================================

An array's outcome (:func:`latest`) combines its tasks' (a task with no events of its
own yet waits to start):

==========================================  ============================================
the tasks' outcomes                         the array's outcome
==========================================  ============================================
any task not ended (waiting, running,       running (not final), each task's state in
requeued)                                   the detail
every task completed                        completed
otherwise                                   the worst task's (in :data:`WORST_FIRST`'s
                                            order), naming the task(s) that ended so
==========================================  ============================================

Torch-free and cheap to import (the standard library and :mod:`slurmtrain.events`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

# The exit statuses (exits.py owns them: the renderer needs the stop's on gen's path, where
# this module is not imported); here for every reader of events.
from .exits import EXIT_FAILED, EXIT_OK, EXIT_REQUEUE_LIMIT, EXIT_START_UP, EXIT_STOPPED  # noqa: F401

Event = dict[str, Any]

# ---- event names ---------------------------------------------------------------------

class Ev:
    """The name of every event, by writer (DEVELOPERS.md lists them with their fields)."""

    # The job's supervisor (slurmtrain/job, in the batch step; every line has job_id and restart).
    STARTED = "started"                    # {nodes}
    RESTARTED = "restarted"                # after `started` when restart > 0
    SIGNAL = "signal"                      # {signal}: the stop signal reached the script
    PREEMPTED = "preempted"                # {exit_code}: Slurm signalled the tasks (PreemptTime)
    REQUEUE = "requeue"                    # {exit_code, counted?}: written just before `scontrol requeue`
    REQUEUED_BY_SLURM = "requeued_by_slurm"  # requeued from outside the script: `by` says who; `silent`: said
                                             # at the next start for one that ended without a word (its batch host died)
    REQUEUE_FAILED = "requeue_failed"      # {message}: scontrol refused the requeue
    REQUEUE_LIMIT = "requeue_limit"        # {max_requeues}
    WATCHDOG_TIMEOUT = "watchdog_timeout"  # {missing}: the nodes that never joined
    SETUP_FAILED = "setup_failed"          # {node, line, exit_code}: a node's first failing setup line
    PREFLIGHT_PASSED = "preflight_passed"  # {nodes}: every node passed the in-job gate
    PREFLIGHT_FAILED = "preflight_failed"  # {nodes}: these did not; left out (spares) or requeued without them
    NODES_LOST = "nodes_lost"              # {nodes, spares, left, cause?, seen_as?}: left out of the job start; spares in their place
    RELAUNCHED = "relaunched"              # {attempt, exit_code?, last_progress?, why?, cause?, seen_as?, nodes?, node? (srun's first failing)}: the launch started again in the job
    FIRST_STEP = "first_step"              # {step, at}: a launch's first heartbeat (at: its own time)
    RESUMED_BEHIND = "resumed_behind"      # {step, saved, path?}: a launch's first step is below the run's newest checkpoint
    STRAGGLER = "straggler"                # {node, compute_ms, others_ms, pct}: a node computes slower
    HANG = "hang"                          # {seconds, ranks, nodes, step, stacks}: no rank beat for hang_timeout
    FINISHED = "finished"                  # the script: {exit_code, launch_exit?}; the program: {step?}
    FAILED = "failed"                      # {exit_code}
    CANCELLED = "cancelled"                # SIGTERM that is neither the time limit nor a node failure
    STOP_TIMEOUT = "stop_timeout"          # {seconds}: tasks still running after the stop; SIGTERM
    STOP_ESCALATED = "stop_escalated"      # {seconds}: still running after SIGTERM; SIGKILL
    STOP_UNSAVED = "stop_unsaved"          # {exit_code}: stopped; the program never reported a checkpoint
    STOP_LINGERED = "stop_lingered"        # {seconds, step}: the program said `stopped`, its launch ran on; ended
    # The program (the built-in trainer, or any program through slurmtrain.stop; no job_id).
    RESUMED = "resumed"                    # {step, seconds?, tier?, from_peer?, data_changed?, schedule_changed?}: seconds the load took; tier "memory" from node memory (train.memory_steps)
    CHECKPOINT_SAVED = "checkpoint_saved"  # {step, seconds? (to durable), stall? (training held), path?}
    STOPPED = "stopped"                    # {step}: saved; leaving with exit 75
    CHECKPOINT_INTERVAL = "checkpoint_interval"  # {steps, after_step, seconds, cost_s, step_s, job_mtbf_h, nodes, faults, node_hours, tier?}: tier "memory" for the copies in node memory
    TRAIN_ERROR = "train_error"            # {step, error}
    MEMORY_OFF = "memory_off"              # {step, error}: a copy in node memory could not be written; no more this launch
    # The CLI.
    SUBMITTED = "submitted"                # {job_id}
    SUBMIT_REFUSED = "submit_refused"      # {message, excluded?}: excluded: the nodes it left out, for a refusal of its size
    CANCEL_REQUESTED = "cancel_requested"  # {job_id, user?}
    RESUBMITTED = "resubmitted"            # {job_id, previous_job_id, user?}
    DEPENDENCY_NEVER_SATISFIED = "dependency_never_satisfied"  # {after, detail}: a chain's run waited for failed
    NODES_EXCLUDED = "nodes_excluded"      # {nodes, source}: submit/resubmit left the bad-node ledger's nodes out
    DOCTOR = "doctor"                      # {passed}: `slurmtrain doctor` ran its checks in this run


SCRIPT_EVENTS = frozenset({Ev.STARTED, Ev.RESTARTED, Ev.SIGNAL, Ev.PREEMPTED, Ev.REQUEUE, Ev.REQUEUED_BY_SLURM,
                           Ev.REQUEUE_FAILED, Ev.REQUEUE_LIMIT, Ev.WATCHDOG_TIMEOUT, Ev.SETUP_FAILED, Ev.PREFLIGHT_PASSED,
                           Ev.PREFLIGHT_FAILED, Ev.NODES_LOST, Ev.RELAUNCHED, Ev.FIRST_STEP, Ev.RESUMED_BEHIND, Ev.STRAGGLER, Ev.HANG, Ev.FINISHED, Ev.FAILED,
                           Ev.CANCELLED, Ev.STOP_TIMEOUT, Ev.STOP_ESCALATED, Ev.STOP_UNSAVED, Ev.STOP_LINGERED})
PROGRAM_EVENTS = frozenset({Ev.RESUMED, Ev.CHECKPOINT_SAVED, Ev.CHECKPOINT_INTERVAL, Ev.STOPPED, Ev.FINISHED, Ev.TRAIN_ERROR,
                            Ev.MEMORY_OFF})
CLI_EVENTS = frozenset({Ev.SUBMITTED, Ev.SUBMIT_REFUSED, Ev.CANCEL_REQUESTED, Ev.RESUBMITTED, Ev.DEPENDENCY_NEVER_SATISFIED,
                        Ev.NODES_EXCLUDED, Ev.DOCTOR})
ALL_EVENTS = SCRIPT_EVENTS | PROGRAM_EVENTS | CLI_EVENTS

# ---- outcome kinds -------------------------------------------------------------------

COMPLETED = "completed"
PREEMPTED = "preempted"
TIME_LIMIT = "time limit"
ASKED = "stopped on request"  # the stop signal long before the time limit's warning: a person's, or the site's
NODE_FAILURE = "node failure"
USER_ERROR = "user error"
CANCELLED = "cancelled"
REQUEUE_LIMIT = "requeue limit"
WATCHDOG = "watchdog"
STOPPED_UNSAVED = "stopped, nothing saved"
HANG = "hang"          # the supervisor ended a hung launch and had no in-job restart left
REQUEUED = "requeued"  # someone's `scontrol requeue` (an administrator's), no node down
RUNNING = "running"    # no end yet: queued, running, or requeued and waiting
UNKNOWN = "unknown"    # Slurm says it ended but the run's events do not say how

# What ended a launch that the supervisor started again in the job (or, for a lost node
# with no spare, requeued): the ``cause`` its supervisor's events carry (decide.launch_fault).
CRASH = "crash"          # a rank failed by itself
NODE_LOST = "node lost"  # the node probe found a node dead (HANG: no rank reported progress)
LAUNCH_FAILED = "launch failed"  # srun could not start the tasks on a node ({nodes}): nothing ran

KINDS = (COMPLETED, PREEMPTED, TIME_LIMIT, ASKED, NODE_FAILURE, USER_ERROR, CANCELLED, REQUEUE_LIMIT,
         WATCHDOG, STOPPED_UNSAVED, HANG, REQUEUED, RUNNING, UNKNOWN)
# Which task's end an array reports when its tasks ended differently: a failure of the
# command says what to fix, a stop or cancel only what happened to it.
WORST_FIRST = (USER_ERROR, WATCHDOG, HANG, REQUEUE_LIMIT, STOPPED_UNSAVED, NODE_FAILURE, TIME_LIMIT, ASKED, PREEMPTED,
               REQUEUED, CANCELLED, UNKNOWN, RUNNING, COMPLETED)
# Ends after which the run goes on by itself once a new job is submitted: a stop that is
# not the program's fault.
STOP_KINDS = frozenset({PREEMPTED, TIME_LIMIT, ASKED, NODE_FAILURE, REQUEUED})


@dataclass(frozen=True)
class Ending:
    """What an end kind is to Slurm and to ``status``: the kind's own words are what ``status``
    prints (``outcome: <kind>: <detail>``)."""

    state: str                # the state Slurm gives a job whose batch script ended this way
    exit_code: int | None     # the batch step's exit status; None: the launch's own, on the event that says it


# The one map from how a start ended to Slurm's state and the exit status: the supervisor's
# verdicts (decide.after_launch) carry the kind, `status` reads a forgotten job's state and
# exit status back from it. A stop whose requeue went through (or was refused: `resubmit`)
# ends the script with exit 0, so Slurm says COMPLETED.
ENDINGS: dict[str, Ending] = {
    COMPLETED: Ending("COMPLETED", EXIT_OK),
    USER_ERROR: Ending("FAILED", None),
    HANG: Ending("FAILED", None),
    STOPPED_UNSAVED: Ending("FAILED", None),
    WATCHDOG: Ending("FAILED", EXIT_START_UP),
    REQUEUE_LIMIT: Ending("FAILED", EXIT_REQUEUE_LIMIT),
    CANCELLED: Ending("CANCELLED", None),
    PREEMPTED: Ending("COMPLETED", EXIT_OK),
    TIME_LIMIT: Ending("COMPLETED", EXIT_OK),
    ASKED: Ending("COMPLETED", EXIT_OK),
    NODE_FAILURE: Ending("COMPLETED", None),  # Slurm requeued the job: the script's end is no end
    REQUEUED: Ending("COMPLETED", None),
}

# `requeued_by_slurm`'s `by`: who requeued the job. Events written before it had no `by`:
# they count as a node failure, as they said then.
BY_NODE_FAILURE = "node failure"
BY_ADMIN = "scontrol requeue"
BY_LIGHTNING = "lightning"  # Lightning's SLURM auto-requeue, seen in a node log: a `scontrol requeue` too
BY_PREEMPTION = "preemption"  # the launch outlived a preemption's GraceTime: Slurm killed and requeued the job


def requeued_by_admin(e: Event) -> bool:
    return e.get("by") in (BY_ADMIN, BY_LIGHTNING)


def preempted_in_job(evs: Iterable[Event], job_id: str, task: int | None = None) -> bool:
    """Slurm preempted job ``job_id`` in one of its starts: ``preempted``, or a requeue of
    Slurm's at the end of the GraceTime."""
    return any(e.get("job_id") == job_id and (e.get("event") == Ev.PREEMPTED or (
        e.get("event") == Ev.REQUEUED_BY_SLURM and e.get("by") == BY_PREEMPTION)) for e in of_task(evs, task))


def completed_in_job(evs: Iterable[Event], job_id: str, task: int | None = None) -> bool:
    """A start of job ``job_id`` ended completed (the script's ``finished``, exit 0)."""
    return any(e.get("job_id") == job_id and is_script_finished(e) and e.get("exit_code") == 0
               for e in of_task(evs, task))


def requeue_fault(e: Event) -> str:
    """The fault a ``requeued_by_slurm`` stands for, in goodput's words."""
    return "preempted" if e.get("by") == BY_PREEMPTION else "requeued" if requeued_by_admin(e) else "node failure"


@dataclass(frozen=True)
class Outcome:
    kind: str                 # one of KINDS
    detail: str               # one line for people
    final: bool = True        # False when the job comes back by itself (requeued) or is still going
    step: int | None = None   # the last step with a checkpoint, where the events say
    event: Event | None = field(default=None, compare=False, repr=False)  # the event that decided it


# ---- starts --------------------------------------------------------------------------

def is_script_finished(e: Event) -> bool:
    """The script's ``finished`` (it carries the exit status); the program's has none."""
    return e.get("event") == Ev.FINISHED and "exit_code" in e


def is_program_finished(e: Event) -> bool:
    return e.get("event") == Ev.FINISHED and "exit_code" not in e


@dataclass(frozen=True)
class Start:
    """One run of the batch script (or the wait before it, or a program without one)."""

    events: tuple[Event, ...]

    @property
    def started(self) -> Event | None:
        """The script's ``started`` event; None while the job waits, or without a script."""
        return next((e for e in self.events if e.get("event") == Ev.STARTED), None)

    @property
    def submission(self) -> Event | None:
        """The ``submitted``/``resubmitted`` that opened it, if one did."""
        first = self.events[0] if self.events else {}
        return first if first.get("event") in (Ev.SUBMITTED, Ev.RESUBMITTED) else None

    @property
    def job_id(self) -> str | None:
        """The job the run's manifest records for this start (an array task's: the array's)."""
        opener = self.started or self.submission
        return None if opener is None else job_of(opener)

    @property
    def has_script(self) -> bool:
        """The batch script ran, or the job waits for it (submitted): not a bare program."""
        return self.started is not None or self.submission is not None

    def last(self, *names: str) -> Event | None:
        return next((e for e in reversed(self.events) if e.get("event") in names), None)


# ---- job arrays ----------------------------------------------------------------------

def job_of(e: Event) -> str | None:
    """The job id a run's manifest records for the event: an array task's array job id,
    else its ``job_id``; None for an event naming no job (the program's)."""
    job = e.get("array_job_id", e.get("job_id"))
    return None if job is None else str(job)


def task_of(e: Event) -> int | None:
    """The array task that wrote the event; None for an event of no task."""
    task = e.get("array_task")
    return task if isinstance(task, int) and not isinstance(task, bool) else None


def array_size(evs: Iterable[Event]) -> int | None:
    """How many tasks the run's array job has (``array_tasks``, else one more than the
    highest task seen); None for a run that is not an array."""
    evs = list(evs)
    sizes = [e["array_tasks"] for e in evs if isinstance(e.get("array_tasks"), int) and e["array_tasks"] > 0]
    seen = [t for e in evs if (t := task_of(e)) is not None]
    if not sizes and not seen:
        return None
    return max(sizes + [max(seen, default=-1) + 1])


def of_task(evs: Iterable[Event], task: int | None) -> list[Event]:
    """Task ``task``'s events and those of no task (the CLI's), in file order; every event
    for ``task`` None. The supervisor of task ``task`` asks its questions of these."""
    return [e for e in evs if task is None or task_of(e) in (None, task)]


def tasks(evs: Iterable[Event]) -> dict[int, list[Event]]:
    """Each array task's events (:func:`of_task`), tasks 0 to N-1, including those with no
    event of their own yet; empty for a run that is not an array."""
    evs = list(evs)
    size = array_size(evs)
    return {t: of_task(evs, t) for t in range(size or 0)}


# ---- starts (of one task) ------------------------------------------------------------

def split(evs: Iterable[Event]) -> list[Start]:
    """The events as starts, in file order (see the module's docstring). For an array,
    split each task's events (:func:`tasks`), never the whole file."""
    groups: list[list[Event]] = []
    for e in evs:
        name = e.get("event")
        current = groups[-1] if groups else []
        if name == Ev.STARTED:
            # The start joins the submission just before it (of the same job, alone so far).
            waiting = len(current) == 1 and current[0].get("event") in (Ev.SUBMITTED, Ev.RESUBMITTED)
            if not (waiting and _same_job(current[0], e)):
                groups.append([])
        elif name in (Ev.SUBMITTED, Ev.RESUBMITTED):
            # The CLI appends `submitted` after sbatch returns; the job may have started
            # already. Then the event belongs to that start.
            started = next((x for x in current if x.get("event") == Ev.STARTED), None)
            if not (started is not None and e.get("job_id") is not None and job_of(started) == str(e["job_id"])):
                groups.append([])
        elif not groups:
            groups.append([])  # events before any start: a program without a job script
        groups[-1].append(e)
    return [Start(tuple(g)) for g in groups]


def _same_job(a: Event, b: Event) -> bool:
    return job_of(a) is None or job_of(b) is None or job_of(a) == job_of(b)


def since_start(evs: Iterable[Event]) -> list[Event]:
    """The events after the latest ``started`` (all of them when none), in file order."""
    evs = list(evs)
    latest = max((i for i, e in enumerate(evs) if e.get("event") == Ev.STARTED), default=-1)
    return evs[latest + 1:]


def finished_since_start(evs: Iterable[Event], task: int | None = None) -> bool:
    """The program wrote ``finished`` since the latest start (of array task ``task``,
    when given): a stop that came as it finished ends the run instead of requeueing it.
    The job's supervisor asks it after the launch ends."""
    return finished_at(evs, task) is not None


def finished_at(evs: Iterable[Event], task: int | None = None) -> float | None:
    """When the program wrote ``finished`` since the latest start (see
    :func:`finished_since_start`); None if it has not."""
    return next((e.get("time", 0.0) for e in reversed(since_start(of_task(evs, task))) if is_program_finished(e)),
                None)


def stopped_at(evs: Iterable[Event], task: int | None = None) -> float | None:
    """When the program last wrote ``stopped`` (it saved and is ending) among ``evs``; None
    if it did not."""
    return next((e.get("time", 0.0) for e in reversed(of_task(evs, task)) if e.get("event") == Ev.STOPPED), None)


def saved_in_run(evs: Iterable[Event], task: int | None = None) -> bool:
    """The program has reported a checkpoint in this run, in any start (``checkpoint_saved``
    or ``stopped``): it saves and resumes, so a requeue after a stop carries on from its
    newest checkpoint. Any start, not only the latest: a stop that comes while a resumed
    program is still loading (before its first save of this start) must not end the run.
    For an array, of task ``task`` only. The job's supervisor asks it before a requeue."""
    return any(e.get("event") in (Ev.CHECKPOINT_SAVED, Ev.STOPPED) for e in of_task(evs, task))


def time_in_starts(evs: Iterable[Event], now: float | None = None) -> tuple[int, float]:
    """How many starts of the job script ran, and their time in all: each from its
    ``started`` to its last event, the latest to ``now`` while the job runs (``now`` given).
    The time in the queue between them is left out. Not for an array (split its tasks)."""
    starts = [s for s in split(evs) if s.started is not None]
    total = 0.0
    for i, s in enumerate(starts):
        end = now if now is not None and i == len(starts) - 1 else float(s.events[-1].get("time", 0.0))
        total += max(0.0, end - float(s.started.get("time", end)))
    return len(starts), total


def best_saved_step(evs: Iterable[Event]) -> int | None:
    """The newest step the program reported a checkpoint of (``checkpoint_saved``, ``stopped``)."""
    return max((e["step"] for e in evs if e.get("event") in (Ev.CHECKPOINT_SAVED, Ev.STOPPED)
                and isinstance(e.get("step"), int)), default=None)


def behind_checkpoint(before: Iterable[Event], first_step: int) -> Event | None:
    """The latest durable checkpoint the program reported before a launch (``before``: the
    run's events until then), when the launch's first step is below it: the program did not
    resume from it (not found: a folder named by job id, like Lightning's ``version_<job>``;
    a resume path not given) and trains those steps again. The latest reported, not the
    highest step: after a rollback (a resume from an older checkpoint on purpose, or a launch
    that started over) the saves that follow are the run's. Below, not equal: a program may
    count from the step it resumed at. Copies in node memory are left out: a launch on new
    nodes rightly resumes from the durable one."""
    saves = [e for e in before if e.get("event") in (Ev.CHECKPOINT_SAVED, Ev.STOPPED)
             and isinstance(e.get("step"), int) and e.get("tier") != "memory"]
    if not saves or first_step >= saves[-1]["step"]:
        return None
    # A `stopped` names no path: the save of its step that did (reported just before it).
    named = [e for e in saves if e["step"] == saves[-1]["step"] and e.get("path")]
    return named[-1] if named else saves[-1]


def progressed_since_start(evs: Iterable[Event], task: int | None = None) -> bool:
    """The program reported a checkpoint since the latest start past every one it reported
    before that start: the start moved the run on (a program that starts over from step 0
    at every start, or resumes and saves nothing new, does not)."""
    evs = of_task(evs, task)
    latest = max((i for i, e in enumerate(evs) if e.get("event") == Ev.STARTED), default=-1)
    now, before = best_saved_step(evs[latest + 1:]), best_saved_step(evs[:latest])
    return now is not None and (before is None or now > before)


def free_requeues(evs: Iterable[Event], job_id: str, task: int | None = None) -> int:
    """Job ``job_id``'s requeues that do not count toward resilience.max_requeues
    (``requeue`` with ``counted: false``: a stop that was no preemption, after a start that
    moved the run on). Slurm's restart count less these is the count the limit is for."""
    return sum(1 for e in of_task(evs, task)
               if e.get("event") == Ev.REQUEUE and e.get("counted") is False and str(e.get("job_id")) == str(job_id))


# ---- outcomes ------------------------------------------------------------------------

def _stop_cause(start: Start) -> tuple[str, str]:
    """Why the tasks of a start were asked to stop: (kind, words)."""
    if (e := start.last(Ev.REQUEUED_BY_SLURM)) is not None:
        return _requeued_by(e)
    # The requeue's reason, not the loss alone: spares may have covered a lost node earlier in
    # the start, and a later stop (the time limit's, one asked for) requeued it.
    why = (start.last(Ev.REQUEUE) or {}).get("reason")
    if (lost := start.last(Ev.NODES_LOST)) is not None and why == "node":
        seen = " (seen first as a hang)" if lost.get("seen_as") == HANG else ""
        return NODE_FAILURE, f"node(s) {lost.get('nodes')} were lost{seen} and no spare was left"
    if (gate := start.last(Ev.PREFLIGHT_FAILED)) is not None and why == "preflight":
        return NODE_FAILURE, f"node(s) {gate.get('nodes')} failed the preflight gate"
    if start.last(Ev.PREEMPTED) is not None:
        return PREEMPTED, "Slurm preempted the job for a higher-priority one"
    if (sig := start.last(Ev.SIGNAL)) is not None:
        return signal_cause(sig)
    return PREEMPTED, "the tasks stopped after a checkpoint"


def _stopped_unsaved(why: str, e: Event) -> str:
    """A stop with nothing saved in the run: why it was not requeued, and what to change."""
    code = e.get("exit_code", "?")
    if e.get("signal"):
        return (f"{why}; the program (or a shell in front of it) was killed by SIG{e['signal']}, the stop signal "
                f"(exit status {code}): it had no handler for it, none at all or none yet, and nothing was saved, so "
                "it was not requeued (set up "
                "slurmtrain.stop's handler, or the Lightning or Hugging Face callback, before heavy imports and data "
                "loading: docs/survival.md)")
    return (f"{why}; the program has reported no checkpoint in this run (exit status {code}), so it was not "
            "requeued (a program reports them through slurmtrain.stop: docs/survival.md; or set "
            'resilience.requeue_when = "always" to requeue anyway)')


def requeued_how(e: Event) -> str:
    """How a ``requeue`` event's requeue went: without nodes, or keeping one the partition
    cannot spare (``waits_for``: the job starts once it is back in service), or not counted
    toward the requeue limit (``counted: false``)."""
    waits = str(e.get("waits_for") or "").split()
    if waits:
        them = "them" if len(waits) > 1 else "it"
        return f"requeued, to start when {back_in_service(waits)} (too few nodes without {them})"
    if e.get("counted") is False:
        return "requeued (not counted toward max_requeues: the start saved a newer checkpoint)"
    return f"requeued without {e['exclude']}" if e.get("exclude") else "requeued"


def back_in_service(nodes: list[str]) -> str:
    return f"{' '.join(nodes)} {'are' if len(nodes) > 1 else 'is'} back in service"


STOP_ASKED = "asked"  # a signal event's cause: the stop signal came long before the time limit's warning


def signal_cause(e: Event) -> tuple[str, str]:
    """Why the stop a ``signal`` event records came: (kind, words), for every reader. The
    supervisor writes its ``cause``: the time limit, for the stop signal (Slurm's warning
    before the limit, or its own when that never came) and for a SIGTERM at the job's planned
    end (decide.term_cause). Events written before it carry none: the stop signal reads as
    the time limit's warning, a SIGTERM as Slurm's (a preemption, or a kill)."""
    name = str(e.get("signal"))
    term = name in ("TERM", "SIGTERM")
    if e.get("cause") == STOP_ASKED:
        left = int(e.get("before_end") or 0)
        return ASKED, (f"the stop signal SIG{name} came {left // 60} min before the time limit, not as Slurm's "
                       "warning: someone asked for the stop (scancel --signal, or the site)")
    if e.get("cause") == TIME_LIMIT and term:
        return TIME_LIMIT, "SIGTERM at the job's planned end: the time limit"
    if e.get("cause") == TIME_LIMIT or (e.get("cause") is None and not term):
        return TIME_LIMIT, f"the warning signal SIG{name} came before the time limit"
    return PREEMPTED, "SIGTERM from Slurm (preemption, or the job was killed)"


def _requeued_by(e: Event) -> tuple[str, str]:
    """(kind, words) of a requeue from outside the script."""
    if e.get("by") == BY_LIGHTNING:
        return REQUEUED, ("requeued by the program: Lightning's SLURM auto-requeue ran `scontrol requeue` on its "
                          "signal, past the run's own stop and requeue rules (pass "
                          "plugins=[SLURMEnvironment(auto_requeue=False)] and slurmtrain's StopCallback: "
                          "docs/survival.md)")
    if e.get("by") == BY_PREEMPTION:
        return PREEMPTED, ("preempted, and the launch was still running when the partition's grace time ran out: "
                           "Slurm killed the job and requeued it itself")
    if requeued_by_admin(e):
        return REQUEUED, ("requeued from outside the job (`scontrol requeue` by an administrator or another "
                          "program; no node of the job was down)")
    nodes = f" ({e['nodes']})" if e.get("nodes") else ""
    return NODE_FAILURE, f"a node of the job failed{nodes} and Slurm requeued the job itself"


def _checkpoint_step(start: Start) -> int | None:
    for e in reversed(start.events):
        if e.get("event") in (Ev.STOPPED, Ev.CHECKPOINT_SAVED, Ev.FINISHED, Ev.RESUMED) and isinstance(e.get("step"), int):
            return e["step"]
    return None


def _by(e: dict[str, Any]) -> str:
    """`` (bob)``: who asked, where the event says (a runs directory a team shares)."""
    return f" ({e['user']})" if e.get("user") else ""


def _with_step(text: str, step: int | None) -> str:
    return text if step is None else f"{text}; last checkpoint at step {step}"


def hang_who(hang: Event) -> str:
    """Whom a ``hang`` event blames: the rank its stacks told apart (stopped, or outside the
    collective the others wait in) where they did, else the last ranks to report (a
    stopped rank's peers stop reporting when it does: they are not the cause)."""
    if hang.get("stuck_ranks"):
        return f"rank(s) {hang['stuck_ranks']} on {hang.get('stuck_nodes')}: {hang.get('why')}"
    return f"the last to report: rank(s) {hang.get('ranks')} on {hang.get('nodes')}"


def outcome(start: Start, later: bool = False) -> Outcome:
    """How one start ended; ``later`` says whether another start followed it."""
    step = _checkpoint_step(start)
    last = start.last
    if not start.has_script:
        return _without_script(start, step)
    if (e := next((e for e in reversed(start.events) if is_script_finished(e)), None)) is not None:
        said = ("the command finished (exit 0)" if not e.get("launch_exit") else
                f"the program finished; its launch then exited with status {e['launch_exit']} (teardown)")
        if e.get("after_stop"):  # finished, or stopped early without a word
            said = ("the command exited 0 after the stop request, taken as finished (a program that stops early "
                    "reports its checkpoint and exits 75, slurmtrain.stop, to be requeued)")
        return Outcome(COMPLETED, _with_step(said, step), True, step, e)
    if (e := last(Ev.WATCHDOG_TIMEOUT)) is not None:
        failed = [f for f in start.events if f.get("event") == Ev.SETUP_FAILED]
        if failed:
            why = "; ".join(f"a setup line failed on {f.get('node')} (exit status {f.get('exit_code')}): "
                            f"{f.get('line')}" for f in failed)
            return Outcome(WATCHDOG, f"start-up: {why} (see the node's log)", True, step, e)
        return Outcome(WATCHDOG, f"start-up watchdog: node(s) {e.get('missing') or '?'} did not join "
                                 "in time (see the batch log)", True, step, e)
    if (e := last(Ev.REQUEUE_LIMIT)) is not None:
        why = _stop_cause(start)[1] if last(Ev.REQUEUE) is None and start.started is not None else ""
        return Outcome(REQUEUE_LIMIT, f"requeue limit reached (max_requeues={e.get('max_requeues')}, restart "
                                           f"{e.get('restart', '?')}); not requeued again" + (f": {why}" if why else ""),
                       True, step, e)
    if (e := last(Ev.CANCEL_REQUESTED)) is not None:
        return Outcome(CANCELLED, _with_step(f"cancelled by `slurmtrain cancel`{_by(e)}", step), True, step, e)
    if (e := last(Ev.CANCELLED)) is not None:
        return Outcome(CANCELLED, _with_step("cancelled (scancel: the batch script got SIGTERM)", step),
                       True, step, e)
    if (e := last(Ev.REQUEUED_BY_SLURM)) is not None:
        # Whatever the dying script wrote after it (`failed` as its tasks died) is no end:
        # the job is queued again and resumes.
        kind, why = _requeued_by(e)
        return Outcome(kind, _with_step(f"{why}; requeued", step), False, step, e)
    if (e := last(Ev.STOP_UNSAVED)) is not None:
        return Outcome(STOPPED_UNSAVED, _stopped_unsaved(_stop_cause(start)[1], e), True, step, e)
    if (e := last(Ev.FAILED)) is not None:
        return _failed(start, e, step)
    if (e := last(Ev.REQUEUE)) is not None:
        kind, why = _stop_cause(start)
        if (refused := last(Ev.REQUEUE_FAILED)) is not None:  # requeue disabled, or refused
            return Outcome(kind, _with_step(f"{why}; not requeued ({refused.get('message')}): continue it with "
                                            "`slurmtrain resubmit`", step), True, step, refused)
        return Outcome(kind, _with_step(f"{why}; {requeued_how(e)}", step), False, step, e)
    if later:
        return Outcome(NODE_FAILURE, _with_step("the batch script ended without a word and Slurm started "
                                                "the job again (a node failure, or a kill after the "
                                                "preemption grace time)", step), False, step)
    if start.started is None:
        sub = start.submission or {}
        verb = "resubmitted" if sub.get("event") == Ev.RESUBMITTED else "submitted"
        return Outcome(RUNNING, f"{verb} as job {sub.get('job_id', '?')}; not started yet", False, step, sub or None)
    return Outcome(RUNNING, _with_step("no end recorded yet", step), False, step)


def _failed(start: Start, e: Event, step: int | None) -> Outcome:
    """A start that ended with ``failed`` (``e``): a hang with no way on, or the command's failure."""
    if (hang := _last_launch_hang(start)) is not None:
        why = ("again at the step and on the ranks it hung before, on other nodes: the program's hang, not a node's"
               if e.get("hung_again") else "no in-job restart left")
        return Outcome(HANG, f"hung: no rank reported progress for {hang.get('seconds')} s; {hang_who(hang)} "
                             f"(step {hang.get('step')}); {why}; stacks in {hang.get('stacks')}; "
                             "not requeued", True, step, e)
    return Outcome(USER_ERROR, _failure(start, e) + "; not requeued", True, step, e)


def by_launch(evs: list[Event]) -> list[list[Event]]:
    """A start's events, launch by launch: the one way readers (the outcome, goodput) mark
    launches off. Each ``relaunched`` opens the next launch (and says its number in ``launch``,
    which every supervisor event carries); the program's events carry none, so the cut is
    where the supervisor's ``relaunched`` stands among them. Always one launch at least."""
    cuts = [i for i, e in enumerate(evs) if e.get("event") == Ev.RELAUNCHED]
    bounds = [0, *cuts, len(evs)]
    return [list(evs[a:b]) for a, b in zip(bounds, bounds[1:])]


def _last_launch_hang(start: Start) -> Event | None:
    """The ``hang`` that ended the start's last launch, if one did."""
    return next((e for e in reversed(by_launch(start.events)[-1]) if e.get("event") == Ev.HANG), None)


def _failure(start: Start, e: Event) -> str:
    """The failed launch's own error: what the supervisor read in the failing node's log (the
    root cause: a rank killed, an exception), else the trainer's; an earlier launch's,
    restarted from since, is not this one's. The trainer's may be a peer's failure seen
    through a collective (a rank killed: the others' "Connection reset by peer")."""
    what = f"the command failed with exit status {e.get('exit_code')}"
    err = next((x for x in reversed(by_launch(start.events)[-1]) if x.get("event") == Ev.TRAIN_ERROR), None)
    if e.get("error"):
        what += f" ({e['error']}" + (f", at step {err.get('step')})" if err is not None else ")")
    elif err is not None:
        what += f" ({err.get('error')}, at step {err.get('step')})"
    elif (fin := next((x for x in reversed(start.events) if is_program_finished(x)), None)) is not None:
        at = f" at step {fin['step']}" if "step" in fin else ""
        what += f" after the program reported it finished{at}"
    if e.get("restarts_spent"):  # it would have started again in the job (a failure after a new checkpoint)
        what += f"; resilience.restarts_in_job ({e['restarts_spent']}) was spent"
    return what


def _without_script(start: Start, step: int | None) -> Outcome:
    """A program that wrote events outside a job (no batch script), or a refused submit."""
    if (e := start.last(Ev.SUBMIT_REFUSED)) is not None:
        left = (f"; the job left out node(s) {e['excluded']} (the bad-node ledger, --exclude): too few left? "
                "`slurmtrain nodes`") if e.get("excluded") else ""
        return Outcome(USER_ERROR, f"sbatch refused the job: {e.get('message')}{left}", True, None, e)
    if (e := start.last(Ev.TRAIN_ERROR)) is not None:
        return Outcome(USER_ERROR, f"the program failed at step {e.get('step')}: {e.get('error')}", True, step, e)
    if (e := next((x for x in reversed(start.events) if is_program_finished(x)), None)) is not None:
        at = f" at step {e['step']}" if "step" in e else ""
        return Outcome(COMPLETED, f"the program finished{at}", True, step, e)
    return Outcome(RUNNING, _with_step("no end recorded yet", step), False, step)


def ends(evs: Iterable[Event]) -> list[Outcome]:
    """One outcome per start of the batch script, oldest first (the last may be RUNNING);
    for an array, every task's starts in the order they started."""
    evs = list(evs)
    per_task = tasks(evs)
    if not per_task:
        return [o for _, o in _ends(evs)]
    place = {id(e): i for i, e in enumerate(evs)}  # of_task keeps the events themselves
    found = [(place[id(start.started)], o) for task_evs in per_task.values() for start, o in _ends(task_evs)]
    return [o for _, o in sorted(found, key=lambda x: x[0])]


def _ends(evs: list[Event]) -> list[tuple[Start, Outcome]]:
    started = [s for s in split(evs) if s.started is not None]
    return [(s, outcome(s, later=i < len(started) - 1)) for i, s in enumerate(started)]


def latest(evs: Iterable[Event]) -> Outcome:
    """How the run stands: the outcome of its latest start. A job that waits to start
    after a resubmission says how the job before it ended. An array combines its tasks'
    (see the module's docstring)."""
    evs = list(evs)
    per_task = tasks(evs)
    if not per_task:
        return _latest(evs)
    return combine({t: (_latest(e), _word(e)) for t, e in per_task.items()})


def _latest(evs: list[Event]) -> Outcome:
    starts = split(evs)
    if not starts:
        return Outcome(RUNNING, "not started yet", False)
    now = outcome(starts[-1])
    if now.kind == RUNNING and starts[-1].started is None and len(starts) > 1:
        before = outcome(starts[-2])
        now = Outcome(RUNNING, f"{now.detail}; the job before ended: {before.kind} ({before.detail})",
                      False, before.step, now.event)
    return now


# ---- arrays: the tasks' outcomes combined -------------------------------------------

def _word(evs: list[Event]) -> str:
    """A task's state in a word or two, beside its outcome: waiting, running, or its end."""
    o = _latest(evs)
    if o.final:
        return o.kind
    if o.kind != RUNNING:
        return f"{o.kind}, requeued"
    starts = split(evs)
    return "running" if starts and starts[-1].started is not None else "waiting"


def task_list(ids: Iterable[int]) -> str:
    """``task 1`` or ``tasks 0, 2``."""
    ids = sorted(ids)
    return ("task " if len(ids) == 1 else "tasks ") + ", ".join(map(str, ids))


def _phrase(words: dict[int, str]) -> str:
    """``tasks 0, 2 completed; task 1 running``: tasks grouped by their word, in task order."""
    groups: dict[str, list[int]] = {}
    for t, w in sorted(words.items()):
        groups.setdefault(w, []).append(t)
    return "; ".join(f"{task_list(ids)} {w}" for w, ids in groups.items())


def combine(per_task: dict[int, tuple[Outcome, str]]) -> Outcome:
    """An array's outcome from each task's (outcome, word): see the module's docstring."""
    n = len(per_task)
    words = {t: w for t, (_, w) in per_task.items()}
    if any(not o.final for o, _ in per_task.values()):
        return Outcome(RUNNING, f"array of {n} tasks: {_phrase(words)}", False)
    if all(o.kind == COMPLETED for o, _ in per_task.values()):
        return Outcome(COMPLETED, f"all {n} tasks of the array completed", True)
    kind = min((o.kind for o, _ in per_task.values()), key=WORST_FIRST.index)
    worst = sorted(t for t, (o, _) in per_task.items() if o.kind == kind)
    first = per_task[worst[0]][0]
    detail, step = first.detail, first.step
    if len(worst) > 1 and step is not None:  # one task's checkpoint is not the others': none said
        detail, step = detail.removesuffix(_with_step("", step)), None
    rest = {t: w for t, w in words.items() if t not in worst}
    return Outcome(kind, f"{task_list(worst)} of {n}: {detail}" + (f" ({_phrase(rest)})" if rest else ""),
                   True, step, first.event)
