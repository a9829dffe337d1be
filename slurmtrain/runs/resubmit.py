"""Continue a run in a new job, for clusters where Slurm does not requeue.

The run directory's ``job.sbatch`` has the run directory baked in, so sbatch-ing it
again starts a job that writes to the same ``events.jsonl`` and ``checkpoints/`` and
resumes from the newest complete checkpoint (the trainer does that by itself; a
program of your own does it by reading its own state). The new job id is appended to
``manifest.json``'s ``job_ids`` and recorded as a ``resubmitted`` event.

``watch`` follows a run and resubmits after each stop that is not the program's fault
(preemption, time limit, node failure) until it completes, fails, or ``max_resubmits``
is used up. It also requeues a job stranded by its batch host: with spares the job runs
with ``--no-kill``, and when the node that runs its batch script (and the supervisor) dies,
Slurm keeps it RUNNING on the other nodes, where nothing of it runs any more, until its
time limit (Slurm 24.11 may instead end it FAILED with exit code 0 and no end event: the
watch requeues that too).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterator, NamedTuple

from .. import eventlog, events, ledger, perms
from ..runfiles import CHECKPOINTS, METRICS_FILE, gone_checkpoints
from ..errors import SlurmError, UsageError
from . import chain, classify, environ, slurmquery, sweeps
from .rundir import POINTS, RECIPE, RunDir
from .states import JobState
from .submit import Submitted, submit_run
from ..eventlog import STOP_KINDS, Ev

RESUBMIT_LOCK = ".resubmit.lock"  # held while one resubmit of the run checks and queues

# Outcomes after which the run should go on in a new job: the stops.
RESUMABLE = STOP_KINDS
# ... and those `resubmit` takes without --force (not a program's own end).
CONTINUABLE = RESUMABLE | {classify.REQUEUE_LIMIT, classify.UNKNOWN, classify.RUNNING, classify.CANCELLED}


@dataclass(frozen=True)
class JobEnd:
    job_id: str
    state: str | None        # Slurm's word, None when Slurm no longer knows the job
    exit_code: int | None
    active: bool             # queued or running (or requeued and waiting)
    signal: int | None = None  # the signal that killed the job script, where one did


def job_end(run: RunDir) -> JobEnd | None:
    """Where the run's latest job stands, from one Slurm query; None if never submitted."""
    job_id = run.job_id
    if job_id is None:
        return None
    info = slurmquery.query([job_id], run.made_at).get(job_id)
    if info is None:
        return JobEnd(job_id, None, None, active=False)
    active = info.state.is_active
    if info.state is JobState.PREEMPTED:  # from 24.05 also Slurm's end of a preempted job it did not requeue
        from .track import preempted_for_good  # ... and its word for one it is about to requeue
        active = not (classify.classify(run.path, info.state.value, info.exit_code).final
                      and preempted_for_good(run.path))
    return JobEnd(job_id, info.raw_state or info.state.value, info.exit_code, active=active, signal=info.signal)


class Stranded(NamedTuple):
    """A job whose batch host died: the host, what became of it, the state Slurm shows."""

    host: str
    what: str  # "is down", or "died and is back, out of the job's nodes"
    state: JobState

    @property
    def how(self) -> str:
        """What Slurm did with the job."""
        return "keeps the job RUNNING" if self.state is JobState.RUNNING else f"ended the job {self.state.value}"

    def __str__(self) -> str:
        return (f"its batch host {self.host} {self.what}, and Slurm {self.how} (--no-kill: a job with spares) "
                "with nothing of it left running")


def stranded(job_id: str, state: JobState = JobState.RUNNING) -> Stranded | None:
    """The job in ``state`` if its batch host died (the supervisor with it), else None.
    Slurm holds the host DOWN, or it died and is back, and Slurm took it out of the job's
    nodes. RUNNING: Slurm keeps the job (--no-kill) with nothing of it left running. FAILED:
    the batch script died a moment before its node and its slurmstepd said so (ExitCode 0:9,
    no end event; seen on 24.11 when a test killed a node's processes one by one). A job
    without spares Slurm ends or requeues itself."""
    found = slurmquery.batch_host(job_id, state)  # scontrol's: sacct does not know it
    if found is None:
        return None
    if slurmquery.down([found.host]):
        return Stranded(found.host, "is down", state)
    if found.nodes and found.host not in found.nodes:  # seen after a node's return: the job stays RUNNING
        return Stranded(found.host, "died and is back, out of the job's nodes", state)
    return None


def requeue_stranded(run: RunDir, end: JobEnd, say: Callable[[str], None],
                     state: JobState = JobState.RUNNING) -> bool | None:
    """Requeue the job if its batch host died while Slurm shows it in ``state`` (RUNNING, or
    FAILED: see ``stranded``); the host goes to the bad-node ledger. The next start resumes
    from the newest checkpoint, and the start that ended without a word reads as a node
    failure. True: requeued; False: stranded, but Slurm refused the requeue; None: not
    stranded (or no answer from Slurm this time)."""
    try:
        found = stranded(end.job_id, state)
    except SlurmError:  # no answer this time: asked again at the next poll
        return None
    if found is None:
        return None
    say(f"job {end.job_id}: {found}; requeueing it")
    try:
        slurmquery.requeue(end.job_id)
    except SlurmError as err:
        say(f"job {end.job_id}: the requeue failed: {err}")
        return False
    try:
        ledger.add(run.path.parent, found.host, f"the batch host of job {end.job_id}, which {found.what} "
                   f"(Slurm {found.how}; requeued by `slurmtrain resubmit --watch`)", run=run.name, job_id=end.job_id,
                   source="node_failure")
    except OSError as err:
        say(f"could not record {found.host} in the bad-node ledger ({err})")
    return True


def resubmit(run: RunDir, force: bool = False, say: Callable[[str], None] = lambda text: None,
             check: Callable[[], None] = lambda: None, time_limit: str | None = None) -> Submitted:
    """sbatch the run's ``job.sbatch`` again as a new job continuing the same run.

    Refused while the run's job is still queued or running, and (unless ``force``)
    after it completed or failed by itself: resubmitting cannot fix a program's error.
    ``check``: the caller's own refusal (raises), once the run is found able to go on.
    ``time_limit``: the run's jobs' time limit from now on (sbatch's ``--time``, kept in
    the manifest for later resubmissions and a watch's), in place of the script's.
    A sweep: only its points that did not complete, each in its own run directory (a
    point's own error only with ``force``); a point of a sweep: that point.
    """
    only = None
    if run.sweep_dir is not None:  # a point: its sweep, that task only
        only = int(run.manifest().get("array_task", -1))
        run = RunDir(run.sweep_dir)
    if not run.script.is_file():
        raise UsageError(f"run {run.name}: no {run.script.name} to resubmit ({run.path})")
    with _one_at_a_time(run):
        return _resubmit(run, only, force, say, check, time_limit)


def _refuse_unwritable(run: RunDir) -> None:
    """Refuse before sbatch what would fail after it (a teammate's run made under umask 022):
    the new job queued, its events unwritten, the job itself failing at its first event."""
    points = [p for p in (run.path / POINTS).iterdir() if p.is_dir()] if (run.path / POINTS).is_dir() else []
    paths = [run.path, run.path / events.EVENTS_FILE, run.logs, run.path / CHECKPOINTS, run.path / ".submitit",
             run.path / METRICS_FILE, *points, *(p / events.EVENTS_FILE for p in points)]
    bad = perms.unwritable(paths)
    if bad is not None:
        raise UsageError(perms.refusal(bad, f"resubmitting run {run.name}"))


def _refuse_gone_checkpoints(run: RunDir, tasks: tuple[int, ...] | None) -> None:
    """A run whose checkpoints were purged (train.checkpoint_dir on scratch) would be refused
    by the trainer at its start, after the queue wait: refused here. Of a sweep, the points
    that go again."""
    dirs = [run.path] if tasks is None else [run.path / POINTS / pt["label"] for pt in sweeps.points(run)
                                             if pt["task"] in tasks]
    for path in dirs:
        target = gone_checkpoints(path)
        if target is None:
            continue
        saved = eventlog.best_saved_step(events.read(path))
        raise UsageError(f"run {path.name}: its {CHECKPOINTS} link to {target} points to nothing now (a scratch "
                         "file system's purge?)" + (f", though it saved checkpoints up to step {saved}"
                                                    if saved is not None else "")
                         + f"; its job would refuse to start: restore them there, or remove the link "
                         f"{path / CHECKPOINTS} to train it again from step 0")


@contextlib.contextmanager
def _one_at_a_time(run: RunDir) -> Iterator[None]:
    """Two resubmits of one run (two terminals, two teammates) one after the other: the
    second sees the first's job queued and is refused, where both once queued a job and
    two jobs trained the run into the same checkpoints."""
    # Read-only: a lock needs no more, and a teammate's lock file (umask 022) opens so too.
    try:
        fd = os.open(run.path / RESUBMIT_LOCK, os.O_RDONLY | os.O_CREAT, 0o666)
    except PermissionError:  # a folder this user cannot write: refused inside, before sbatch
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _resubmit(run: RunDir, only: int | None, force: bool, say: Callable[[str], None],
              check: Callable[[], None], time_limit: str | None) -> Submitted:
    end = job_end(run)
    if end is not None and end.active:
        # A point waits for its own task only: the sweep's other points may still be queued.
        busy = end.state if only is None else _task_state(end.job_id, only)
        if busy is not None:
            whose = f"job {end.job_id}" if only is None else f"its task {end.job_id}_{only}"
            raise UsageError(f"run {run.name}: {whose} is still {busy}; resubmit after it ends "
                             f"(or cancel it with `slurmtrain cancel {run.name}`)")
    tasks = _points_again(run, force, only) if sweeps.points(run) else None
    if tasks is None:
        outcome = classify.classify(run.path, end.state if end else None, end.exit_code if end else None,
                                    end.signal if end else None)
        if not force and outcome.kind not in CONTINUABLE:
            raise UsageError(f"run {run.name} ended: {outcome.kind} ({outcome.detail}); "
                             + ((_more_steps(run, outcome.step) if outcome.kind == classify.COMPLETED
                                 else _after_failure(run))
                                or "nothing to continue (use --force to submit it again anyway)"))
    _refuse_unwritable(run)  # after why it cannot go at all (its job still running)
    _refuse_gone_checkpoints(run, tasks)
    check()
    if time_limit:
        run.update_manifest(time_limit=time_limit)
    afters = _afters_again(run, say)
    previous = run.job_id
    from .. import ledger
    bad = ledger.excluded(run.path.parent, ledger.hours_of_run(run.path))
    if bad:
        events.append(run.path, Ev.NODES_EXCLUDED, nodes=" ".join(bad), source="bad-node ledger")
    # sbatch's --exclude replaces the script's #SBATCH --exclude: keep what the run excluded already.
    exclude = sorted(set(bad) | set(run.manifest().get("exclude") or []))
    if exclude:
        run.update_manifest(exclude=exclude)
    args = ((f"--exclude={','.join(exclude)}",) if exclude else ()) + \
        ((f"--array={','.join(str(t) for t in tasks)}{_throttle(run)}",) if tasks is not None else ()) + \
        _where(run) + _time_limit(run) + \
        chain.sbatch_args(afters)
    done = submit_run(run, args, tasks=tasks)
    if chain.afters_of(run):  # what it waits for now (the runs waited for list it already)
        run.update_manifest(after=[asdict(a) for a in afters])
    events.append(run.path, Ev.RESUBMITTED, job_id=done.job_id, previous_job_id=previous or "", user=perms.me())
    drift = environ.drift(run.manifest().get("environment"))
    if drift:  # sbatch gave the job this shell's environment, not the submit's
        say(f"warning: job {done.job_id} has this shell's environment, not the one run {run.name} was submitted "
            f"with ({drift}): a program that reads its settings from it runs with these; cancel and resubmit "
            "from a shell that has them, or put them in the profile's [env] vars")
    return done


def _throttle(run: RunDir) -> str:
    """The sweep's --max-parallel, as sbatch's --array takes it: the --array given here
    replaces the script's, throttle and all."""
    most = (run.manifest().get("sweep") or {}).get("max_parallel")
    return f"%{most}" if most else ""


def _afters_again(run: RunDir, say: Callable[[str], None]) -> list:
    """A run of a chain (``submit --after``) waits again for the runs it was submitted after
    that have not completed, at their current jobs (one resubmitted meanwhile: its new job);
    UsageError where one of them can no longer complete: that run is to be resubmitted first."""
    from . import track

    before = chain.afters_of(run)
    if not before:
        return []
    pairs = [("after_any" if a.kind == "afterany" else "after", a.path) for a in before]
    try:
        afters, notes = chain.resolve(pairs, run.path.parent, lambda r: track.statuses([r], with_events=True)[0])
    except UsageError as err:
        why = str(err).split(": ", 1)[-1].split(": a run after it would never start")[0]
        raise UsageError(f"run {run.name} was submitted to start after {', '.join(a.run for a in before)}, and "
                         f"{why}: resubmit that run first (`slurmtrain resubmit RUN`), then this one") from None
    for note in notes:
        say(note.split(": ", 1)[-1])
    for a in afters:
        say(f"waits until {a.words()}")
    return afters


def _task_state(job_id: str, task: int) -> str | None:
    """Array task ``task`` of job ``job_id`` while Slurm has it queued or running: its state."""
    info = slurmquery.query([job_id]).get(job_id)
    found = info.task_infos().get(task) if info is not None else None
    return found.state.value if found is not None and found.state.is_active else None


def _more_steps(run: RunDir, step: int | None) -> str | None:
    """For a run that completed: its recipe.toml (the run's copy, edited since) asking for
    more steps than it reached, said with how to go on."""
    from .._toml import tomllib
    try:
        steps = tomllib.loads((run.path / RECIPE).read_text())["train"]["steps"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(steps, int) or step is None or steps <= step:
        return None
    fixed = _steps_in_command(run)
    if fixed is not None:  # the job's command sets them: the recipe's steps never reach it
        return (f"its {RECIPE} now asks for {steps} steps, but the job's command sets {fixed} ({run.script.name}), "
                f"and it ended at step {step}: nothing to continue (submit a new run to train further)")
    return (f"its {RECIPE} now asks for {steps} steps, past step {step} where it ended: --force continues "
            "it from there")


def _after_failure(run: RunDir) -> str | None:
    """A run that failed after it saved: --force continues it from its newest checkpoint,
    once what failed is fixed (it is not "nothing to continue")."""
    step = eventlog.best_saved_step(events.read(run.path))
    return None if step is None else (f"fix what failed, then --force continues it from its newest checkpoint "
                                      f"(step {step})")


_STEPS_SET = re.compile(r"(?:--train-steps[= ]'?|train\.steps=)(\d+)")


def _steps_in_command(run: RunDir) -> str | None:
    """``train.steps=N`` or ``--train-steps N`` in the job script's trainer command, the last one."""
    try:
        found = _STEPS_SET.findall(run.script.read_text())
    except OSError:
        return None
    return f"train.steps={found[-1]}" if found else None


def _time_limit(run: RunDir) -> tuple[str, ...]:
    """sbatch's ``--time`` where a resubmission changed the run's (``resubmit --time``): it
    wins over the script's #SBATCH line; the supervisor asks Slurm for the end it sets."""
    limit = run.manifest().get("time_limit")
    return (f"--time={limit}",) if limit else ()


def _where(run: RunDir) -> tuple[str, ...]:
    """sbatch's ``--chdir``: the job runs where the run was first submitted from, whatever
    the directory of this resubmission (a detached watch's is the run directory): the
    command's relative paths (a recipe's data path, say) are relative to that."""
    manifest = run.manifest()
    first = manifest.get("submit_cwd")
    # A script given to sbatch by hand (job/adopt.py) names its run directory after the job
    # and its batch log after its #SBATCH --output: this run's are given instead.
    own = ((f"--export=ALL,SLURMTRAIN_RUN_DIR={run.path}", f"--output={run.logs}/job-%j.out")
           if manifest.get("submitted_by") == "sbatch" else ())
    if not first:
        return own
    if not Path(first).is_dir():
        raise UsageError(f"run {run.name} was submitted from {first}, which is gone: its job runs there (its "
                         "relative paths are from there); create it, or submit the run anew")
    return (f"--chdir={first}", *own)


def _points_again(run: RunDir, force: bool, only: int | None) -> tuple[int, ...]:
    """The tasks of the sweep's points to submit again (``only``: that task alone): every
    point that did not complete, one that failed by its own error only with ``force``.
    UsageError, naming each point and how it ended, when none is left."""
    from .track import statuses

    slurm = {t.task: t for t in statuses([run], with_events=False)[0].tasks}
    again, left = [], []
    for point in sweeps.points(run):
        if only is not None and point["task"] != only:
            continue
        t = slurm.get(point["task"])
        outcome = classify.classify(run.path / POINTS / point["label"], t.state.value if t else None,
                                    t.exit_code if t else None)
        if outcome.kind != classify.COMPLETED and (force or outcome.kind in CONTINUABLE):
            again.append(point["task"])
        else:
            left.append(f"{point['label']}: {outcome.kind}")
    if not again:
        hint = "a completed point is not run again" if force else "a point that failed by its own error needs --force"
        raise UsageError(f"sweep {run.name}: no point to continue ({'; '.join(left) or 'no points'}); {hint}")
    return tuple(again)


def watch(run: RunDir, max_resubmits: int = 10, poll_s: float = 15.0,
          say: Callable[[str], None] = print, sleep: Callable[[float], None] = time.sleep,
          time_limit: str | None = None) -> classify.Outcome:
    """Follow ``run``; after each resumable end (preempted, time limit, node failure)
    submit it again, at most ``max_resubmits`` times (``time_limit``: theirs, as
    :func:`resubmit`'s). Returns the final outcome."""
    if time_limit:
        run.update_manifest(time_limit=time_limit)
    resubmits = 0
    seen_job = None
    while True:
        try:
            end = job_end(run)
        except SlurmError as err:  # sacct, say, timing out: ask again, not give up the watch
            say(f"Slurm did not answer ({err}); asking again in {poll_s:g} s")
            if run.job_id:  # the controller may answer still: seen with a node down, sacct timing out each time
                requeue_stranded(run, JobEnd(run.job_id, None, None, active=True), say)
            sleep(poll_s)
            continue
        if end is None:
            raise UsageError(f"run {run.name} was never submitted (no job id in manifest.json)")
        if end.job_id != seen_job:
            say(f"following job {end.job_id} of run {run.name}")
            seen_job = end.job_id
        if end.active:
            requeue_stranded(run, end, say)
            sleep(poll_s)
            continue
        outcome = classify.classify(run.path, end.state, end.exit_code, end.signal)
        if outcome.kind == classify.UNKNOWN:
            requeued = requeue_stranded(run, end, say, JobState.FAILED)
            if requeued:
                sleep(poll_s)  # the same job, queued again
                continue
            if requeued is False:  # Slurm refused (a job marked not requeueable, say): a new job goes on
                outcome = classify.Outcome(classify.NODE_FAILURE, f"{outcome.detail}; its batch host was down",
                                           True, outcome.step)
        if outcome.kind == classify.RUNNING:
            # Slurm forgot the job or has not written the last event yet: ask again shortly.
            sleep(poll_s)
            if job_end(run) == end and classify.classify(run.path, end.state, end.exit_code, end.signal) == outcome:
                say(f"job {end.job_id} ended ({end.state or 'unknown to Slurm'}) without an end event; stopping")
                return outcome
            continue
        say(f"job {end.job_id} ended: {outcome.kind}: {outcome.detail}")
        # A requeue limit is a stop that saved and was not requeued (max_requeues, 0 for a
        # run that leaves its requeues to this watch): continued too, under --max-resubmits.
        if outcome.kind not in RESUMABLE | {classify.REQUEUE_LIMIT}:
            return outcome
        if resubmits >= max_resubmits:
            say(f"not resubmitting: --max-resubmits {max_resubmits} reached")
            return classify.Outcome(classify.REQUEUE_LIMIT, f"{outcome.detail}; {resubmits} resubmissions, "
                                    f"max_resubmits={max_resubmits} reached", True, outcome.step)
        done = resubmit(run, say=say)
        resubmits += 1
        say(f"resubmitted as job {done.job_id} ({resubmits}/{max_resubmits})")
