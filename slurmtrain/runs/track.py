"""The state of runs: Slurm's answer where it still knows the job, else the run's own
events.jsonl. Many runs cost one query to Slurm (:func:`slurmquery.query`).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, TextIO

from .. import eventlog, launchers, programlog
from ..errors import UsageError
from ..slurmtext import SRUN_TASK_ERROR as _SRUN_TASK_ERROR  # one pattern: the supervisor's summary reads it too
from . import classify, goodput, pace, progress, slurmquery, sweeps, watcher
from .rundir import RunDir, events_of, log_label
from .states import JobState, aggregate



@dataclass
class TaskStatus:
    """One task of an array job: Slurm's answer, or its events' once Slurm forgot it."""

    task: int
    state: JobState
    source: str                      # scontrol, sacct or events.jsonl
    job_id: str | None = None        # the task's own job id
    nodelist: str | None = None
    exit_code: int | None = None
    elapsed_s: int | None = None     # Slurm's, where it answered
    restarts: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "state": self.state.value}


@dataclass
class RunStatus:
    run: str | None                  # run directory, None for a bare job id
    name: str
    job_id: str | None
    state: JobState
    source: str                      # scontrol, sacct, events.jsonl or manifest
    note: str | None = None
    nodes: int | None = None
    nodelist: str | None = None
    elapsed_s: int | None = None
    exit_code: int | None = None
    signal: int | None = None
    restarts: int | None = None
    submitted: str | None = None
    reason: str | None = None
    program_exit_code: int | None = None  # what the program itself returned, from the node logs
    outcome: str | None = None            # classify's kind: completed, preempted, user error, ...
    outcome_detail: str | None = None     # classify's one line for people
    tasks: list[TaskStatus] = field(default_factory=list)  # an array job's, by task
    events: list[dict[str, Any]] = field(default_factory=list)
    goodput: dict[str, Any] | None = None  # runs/goodput.py's report (to_json), once the job was submitted
    stragglers: list[dict[str, Any]] = field(default_factory=list)  # the supervisor's `straggler` events
    behind: list[dict[str, Any]] = field(default_factory=list)  # its `resumed_behind`: launches that started over
    slow: list[dict[str, Any]] = field(default_factory=list)  # stretches of slow steps (runs/pace.py)
    checkpoint_interval: dict[str, Any] | None = None  # the trainer's latest choice under checkpoint_every = "auto"
    memory_interval: dict[str, Any] | None = None      # ... for its copies in node memory (train.memory_steps)
    watcher: dict[str, Any] | None = None              # the `resubmit --watch` following it (runs/watcher.py)
    ended: bool = False  # the job will not run again by itself (Slurm's state, or its PREEMPTED and the events)
    sweep: list[dict[str, Any]] = field(default_factory=list)  # a sweep's points (runs/sweeps.py rows)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["state"] = self.state.value
        d["tasks"] = [t.to_json() for t in self.tasks]
        return d


def statuses(targets: Iterable[RunDir | str], with_events: bool = True) -> list[RunStatus]:
    """Status of each target (a run, or a bare job id) with one query to Slurm for all."""
    targets = list(targets)
    asked = [t for t in targets if not (isinstance(t, RunDir) and t.sweep_dir)]  # a point asks of its sweep
    job_ids = {t if isinstance(t, str) else t.job_id for t in asked} - {None}
    infos: dict[str, slurmquery.JobInfo] = {}
    if job_ids:
        from . import jobs  # submitit's job objects; imported only when there is a job to ask about

        tracked = [jobs.job(t.path if isinstance(t, RunDir) else ".", t if isinstance(t, str) else t.job_id)
                   for t in asked if (t if isinstance(t, str) else t.job_id)]
        jobs.refresh(tracked, _created(asked))
        infos = {j.job_id: i for j in tracked if (i := j.info(mode="cache")) is not None}
    out = [_point_status(t, with_events) if t not in asked else _status(t, infos, with_events) for t in targets]
    for t, st in zip(targets, out):
        if with_events and isinstance(t, RunDir) and st.state is JobState.FAILED:
            st.program_exit_code = program_exit_code(t, st.job_id)
    for t, st in zip(targets, out):
        if isinstance(t, RunDir):
            _classify(t, st)
            _chained(t, st)
            if with_events and sweeps.points(t):
                st.sweep = sweeps.rows(t, st.tasks)
    return out


def _created(targets: list[RunDir | str]) -> float | None:
    """When the first of the runs was made, none of their jobs submitted before; None where
    a bare job id (or a run without the time) is asked: its job may be of any age."""
    times = [t.made_at if isinstance(t, RunDir) else None for t in targets]
    return None if None in times else min(times, default=None)


def _chained(run: RunDir, st: RunStatus) -> None:
    """A run of a chain (runs/chain.py): what its job waits for, or why it was cancelled
    without running (a run it waited for can no longer complete)."""
    from . import chain

    afters = chain.afters_of(run)
    if not afters or st.job_id is None:
        return
    never = st.reason == "DependencyNeverSatisfied"
    if st.state is JobState.PENDING and not never:
        st.note = chain.waiting_note(afters, st.reason) or st.note
        return
    if never or (st.state is JobState.CANCELLED and not st.elapsed_s):
        upstream = {a.path: s for a, s in zip(afters, statuses([RunDir(Path(a.path)) for a in afters]))}
        st.outcome, st.outcome_detail = "cancelled", chain.never_note(run, afters, upstream)


def _classify(run: RunDir, st: RunStatus) -> None:
    """How the run's latest start ended (classify), in ``st.outcome``/``st.outcome_detail``."""
    o = classify.classify(run.path, None if st.state is JobState.UNKNOWN else st.state.value, st.exit_code,
                          st.signal)
    if st.state.is_active and o.final and st.state is not JobState.PREEMPTED:
        # The job is queued or running again (a resubmission that has not started yet):
        # the end the events record is an earlier job's.
        o = classify.Outcome(classify.RUNNING, f"job {st.job_id} is {st.state.value}; the job before "
                                               f"ended: {o.kind} ({o.detail})", False, o.step)
    st.outcome, st.outcome_detail = o.kind, o.detail
    # From 24.05 Slurm ends a job it preempted and that was not requeued (the requeue limit,
    # nothing saved) as PREEMPTED, a state it also shows on the way back to the queue.
    st.ended = st.state.is_final or (st.state is JobState.PREEMPTED and o.final and preempted_for_good(run.path))


# A requeueable job Slurm killed at the end of a preemption's GraceTime (the supervisor with
# it: no end in the events) shows PREEMPTED until Slurm requeues it, seconds later (32 s in
# CI's sandbox, under load); one that stays so this long after its last event was not requeued.
PREEMPTED_SETTLES_S = 300


def preempted_for_good(run_dir: Path, now: float | None = None) -> bool:
    """A job Slurm shows PREEMPTED has ended for good: its events say the start ended (not
    requeued: the requeue limit, nothing saved), or nothing moved for PREEMPTED_SETTLES_S."""
    evs = events_of(run_dir)
    if eventlog.latest(evs).final:
        return True
    last = max((float(e.get("time", 0.0)) for e in evs), default=0.0)
    return (time.time() if now is None else now) - last >= PREEMPTED_SETTLES_S


def _status(target: RunDir | str, infos: dict[str, slurmquery.JobInfo], with_events: bool) -> RunStatus:
    if isinstance(target, str):
        info = infos.get(target)
        if info is None:
            return RunStatus(None, target, target, JobState.UNKNOWN, "slurm",
                             note=f"Slurm does not know job {target} (finished more than MinJobAge ago, "
                                  "or never existed), and no run directory records it")
        return _from_info(RunStatus(None, target, target, info.state, info.source, submitted=info.submit_time,
                                    note="no run directory records this job (not submitted by slurmtrain, or "
                                         "its run is under another --runs-dir): Slurm's view of it"), info)
    manifest = target.manifest()
    evs = events_of(target.path)  # in file order, the order eventlog reads them in
    st = RunStatus(str(target.path), target.name, target.job_id, JobState.UNKNOWN, "manifest",
                   nodes=manifest.get("nodes"), submitted=manifest.get("submitted_at") or manifest.get("created_at"),
                   events=evs if with_events else [])
    if manifest.get("state") == "refused":
        st.state, st.note = JobState.REFUSED, manifest.get("refusal")
        return st
    _from_run_events(st, evs)
    if with_events:  # metrics.jsonl is read for one run's full status, not for a table of runs
        st.slow = [s.to_json() for s in pace.slow_stretches(progress.read_metrics(target.path)[0], evs)]
        st.watcher = watcher.holder(target)
    if st.job_id is None:
        st.note = "not submitted (no job id in manifest.json)"
        return st
    info = infos.get(st.job_id)
    size = target.array_size or eventlog.array_size(evs)  # a job array's tasks; None: one job
    if info is not None:
        st.state, st.source = info.state, info.source
        _from_info(st, info)
        if size is not None:
            st.nodes = manifest.get("nodes")  # each task's; the tasks' own nodes are in st.tasks
            _array_from_info(st, info, evs, size)
        elif info.state is JobState.SIGNALING:
            _ended_while_signaling(st, evs)
        return st
    if size is not None:
        return _array_from_events(st, evs, size)
    return _from_events(st, evs)


def _from_run_events(st: RunStatus, evs: list[dict[str, Any]]) -> None:
    """What the run's own events say whatever Slurm says: goodput, the checkpoint cadence,
    launches that did not resume from the newest checkpoint, stragglers."""
    report = goodput.of_events(evs)
    st.goodput = report.to_json() if report.spans else None
    chosen = [e for e in evs if e.get("event") == eventlog.Ev.CHECKPOINT_INTERVAL]
    st.checkpoint_interval = next((e for e in reversed(chosen) if not e.get("tier")), None)
    st.memory_interval = next((e for e in reversed(chosen) if e.get("tier") == "memory"), None)
    st.behind = [{k: e.get(k) for k in ("time", "step", "saved", "path")} for e in evs
                 if e.get("event") == eventlog.Ev.RESUMED_BEHIND]
    st.stragglers = [{k: e.get(k) for k in ("time", "node", "pct", "compute_ms", "others_ms")} for e in evs
                     if e.get("event") == eventlog.Ev.STRAGGLER]


def _point_status(point: RunDir, with_events: bool) -> RunStatus:
    """A sweep's point: its task's state in the sweep's array (in the latest job that ran it),
    its own events (history, goodput), its job as squeue shows it (ARRAY_TASK)."""
    manifest = point.manifest()
    [sweep] = statuses([RunDir(point.sweep_dir)], with_events=False)
    task = next((t for t in sweep.tasks if t.task == manifest.get("array_task")), None)
    evs = events_of(point.path)
    st = RunStatus(str(point.path), point.name, point.job_id, task.state if task else JobState.UNKNOWN,
                   task.source if task else "events.jsonl", nodes=sweep.nodes,
                   nodelist=task.nodelist if task else None, exit_code=task.exit_code if task else None,
                   elapsed_s=task.elapsed_s if task else None, restarts=task.restarts if task else None,
                   submitted=manifest.get("submitted_at"), events=evs if with_events else [])
    _from_run_events(st, evs)
    return st


def _from_info(st: RunStatus, info: slurmquery.JobInfo) -> RunStatus:
    st.nodes = info.nodes or st.nodes
    st.nodelist, st.elapsed_s, st.restarts, st.reason = info.nodelist, info.elapsed_s, info.restarts, info.reason
    if info.state.is_final or info.state is JobState.PREEMPTED:
        st.exit_code, st.signal = info.exit_code, info.signal
    return st


def _job_events(evs: list[dict[str, Any]], job_id: str) -> list[dict[str, Any]]:
    """The events of job ``job_id``: those naming it, and those naming no job (the
    program's), from the first that names it on (its ``submitted``/``resubmitted``, or its
    ``started`` when the job started before the CLI wrote that)."""
    born = next((i for i, e in enumerate(evs) if eventlog.job_of(e) == job_id), 0)
    return [e for e in evs[born:] if eventlog.job_of(e) in (None, job_id)]


def _from_events(st: RunStatus, evs: list[dict[str, Any]]) -> RunStatus:
    """Slurm has forgotten the job: its own events say how it ended, if they can
    (eventlog's outcome of the job's latest start)."""
    mine = _job_events(evs, st.job_id)
    st.source = "events.jsonl"
    starts = eventlog.split(mine)
    started = [s.started for s in starts if s.started is not None]
    if started:
        st.nodelist = started[-1].get("nodes")
        st.restarts = max(int(e.get("restart", 0)) for e in mine if str(e.get("restart", 0)).isdigit())
    end = eventlog.outcome(starts[-1]) if starts else None
    if end is None or not end.final or end.event is None or end.kind not in eventlog.ENDINGS:
        requeued = next((e for e in reversed(starts[-1].events) if e.get("event") in
                         (eventlog.Ev.REQUEUE, eventlog.Ev.REQUEUED_BY_SLURM)), None) if starts else None
        if requeued is not None:
            st.note = (f"Slurm no longer knows job {st.job_id} and events.jsonl records no end: it was "
                       f"requeued (`{requeued['event']}`) and never started again (cancelled while waiting?)")
        else:
            st.note = (f"Slurm no longer knows job {st.job_id} and events.jsonl records no end: "
                       "it was cancelled, killed, or never started")
        return st
    last_final = end.event
    ending = eventlog.ENDINGS[end.kind]
    st.state = JobState(ending.state)
    st.exit_code = last_final.get("exit_code", ending.exit_code)
    if started:
        st.elapsed_s = int(float(last_final["time"]) - float(started[-1]["time"]))
    st.note = f"Slurm no longer knows job {st.job_id}; state from events.jsonl ({last_final['event']})"
    return st


def _ended_while_signaling(st: RunStatus, evs: list[dict[str, Any]]) -> None:
    """SIGNALING is a flag of a signal in flight, and scontrol's text shows it in place of
    the job's own state. Slurm 24.11 once kept it for minutes on a job that had ended
    (slurmctld logged the end, squeue no longer listed it). When the job's events record a
    final end of its latest start, that end is the state."""
    end = _from_events(replace(st, state=JobState.UNKNOWN, note=None), evs)
    if end.state.is_final:
        st.state, st.exit_code, st.elapsed_s = end.state, end.exit_code, end.elapsed_s or st.elapsed_s
        st.source = "events.jsonl"
        st.note = (f"Slurm still shows job {st.job_id} SIGNALING (a signal in flight), but events.jsonl "
                   "records its end: state from events.jsonl")


# ---- job arrays: the tasks' states combined ---------------------------------------------

def _array_from_info(st: RunStatus, info: slurmquery.JobInfo, evs: list[dict[str, Any]], size: int) -> None:
    """Each task from Slurm's answer; a task Slurm has forgotten (it ended more than
    MinJobAge ago) from its events. The run's state combines them (states.aggregate)."""
    known = info.task_infos()
    per_task = eventlog.tasks(_job_events(evs, st.job_id))
    last = _task_jobs(evs, size)
    st.tasks = [_task_in_job(st, evs, last[t], t)[0] if last.get(t, st.job_id) != st.job_id
                else _slurm_task(t, known[t]) if t in known else _unlisted_task(st, info, per_task.get(t, []), t)
                for t in range(size)]
    _combine_tasks(st)


def _task_jobs(evs: list[dict[str, Any]], size: int) -> dict[int, str]:
    """Each task's latest job: the last ``submitted`` that sent it (a sweep's resubmission
    sends only its unfinished points, ``tasks``; one without ``tasks`` sent every task)."""
    out: dict[int, str] = {}
    for e in evs:
        if e.get("event") == eventlog.Ev.SUBMITTED and e.get("job_id"):
            for t in e.get("tasks") or range(size):
                out[t] = str(e["job_id"])
    return out


def _task_in_job(st: RunStatus, evs: list[dict[str, Any]], job_id: str, task: int) -> tuple[TaskStatus, RunStatus]:
    """How ``task`` ended in job ``job_id``, from its events (:func:`_events_task`): for a task
    the run's latest job did not run again (it had completed), its own latest job."""
    return _events_task(replace(st, job_id=job_id), eventlog.tasks(_job_events(evs, job_id)).get(task, []), task)


def _unlisted_task(st: RunStatus, info: slurmquery.JobInfo, evs: list[dict[str, Any]], task: int) -> TaskStatus:
    """A task that Slurm's answer for the array does not list. Its events say how it ended
    if it did (Slurm forgot it MinJobAge after). If they record no end, the task is still
    Slurm's: slurmdbd's first record of an array is one plain line with no task in it
    until a task starts (seen on the sandbox), so sacct lists no task of a pending array.
    A task that never started has that record's state (pending, or cancelled with the
    array), or is pending beside listed tasks; one that started is running. Only
    a task that started, has no end and that Slurm's per-task answer lacks stays UNKNOWN
    (killed without a word and forgotten since)."""
    found, _ = _events_task(st, evs, task)
    if found.state is not JobState.UNKNOWN:
        return found
    started = any(e.get("event") == eventlog.Ev.STARTED for e in evs)
    if not started:
        return TaskStatus(task, JobState.PENDING if info.tasks else info.state, info.source)
    if not info.tasks:
        return TaskStatus(task, JobState.RUNNING, "events.jsonl", found.job_id, found.nodelist)
    return found


def _slurm_task(task: int, info: slurmquery.JobInfo) -> TaskStatus:
    # A pending range's record carries the array's id, which is no task's own yet.
    own = info.job_id if info.array_task == str(task) else None
    return TaskStatus(task, info.state, info.source, own, info.nodelist,
                      info.exit_code if info.state.is_final else None, info.elapsed_s, info.restarts)


def _events_task(st: RunStatus, evs: list[dict[str, Any]], task: int) -> tuple[TaskStatus, RunStatus]:
    """A task as its events say it ended (:func:`_from_events` on its own events)."""
    end = _from_events(RunStatus(st.run, st.name, st.job_id, JobState.UNKNOWN, "events.jsonl"), evs)
    own = next((str(e["job_id"]) for e in reversed(evs) if e.get("event") == eventlog.Ev.STARTED), None)
    return TaskStatus(task, end.state, "events.jsonl", own, end.nodelist, end.exit_code), end


def _combine_tasks(st: RunStatus) -> None:
    st.state = aggregate([t.state for t in st.tasks])
    speaks = next((t for t in st.tasks if t.state is st.state), None)  # the task the state is of
    st.exit_code = speaks.exit_code if speaks is not None and st.state.is_final else None


def _array_from_events(st: RunStatus, evs: list[dict[str, Any]], size: int) -> RunStatus:
    """Slurm has forgotten every task: each one's events say how it ended."""
    last = _task_jobs(evs, size)
    found = [_task_in_job(st, evs, last.get(t, st.job_id), t) for t in range(size)]
    ends = {task.task: end for task, end in found}
    st.source = "events.jsonl"
    st.tasks = [task for task, _ in found]
    _combine_tasks(st)
    st.elapsed_s = max((e.elapsed_s for e in ends.values() if e.elapsed_s is not None), default=None)
    st.restarts = sum(e.restarts or 0 for e in ends.values())
    said = {t: e.state.value if e.state is not JobState.UNKNOWN else "no end recorded" for t, e in ends.items()}
    st.note = (f"Slurm no longer knows array job {st.job_id}; state from events.jsonl: "
               + "; ".join(f"task {t} {w}" for t, w in said.items()))
    return st


# ---- logs ------------------------------------------------------------------------------

def program_exit_code(run: RunDir, job_id: str | None = None) -> int | None:
    """The exit status the program itself gave, where its launcher logged it (a launcher's
    own status says only that a worker failed: launchers/)."""
    patterns = [spec.exit_status_in_log for spec in launchers.LAUNCHERS.values() if spec.exit_status_in_log]
    for lines in failing_node_logs(run, job_id, lines=200).values():
        text = "\n".join(lines)
        m = next((m for m in (p.search(text) for p in patterns) if m), None)
        if m:
            return int(m.group(1))
    return None




def tail(path: Path, lines: int = 20) -> list[str]:
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 64 * 1024))
            text = f.read().decode(errors="replace")
    except FileNotFoundError:
        return []
    return text.splitlines()[-lines:] if lines > 0 else []  # [-0:] would be every line


def failing_node_logs(run: RunDir, job_id: str | None = None, lines: int = 20) -> dict[str, list[str]]:
    """Last lines of the log of each node srun reported as failing (in any array task's
    batch log), by label (:func:`rundir.log_label`); every node's if none was named. Of
    the last launch only: an earlier one's error was said (and restarted from) then."""
    job_id = job_id or run.job_id
    node_logs = run.node_logs(job_id)
    failed = [log_label(task, m["node"]) for task, batch in run.batch_logs(job_id).items()
              for m in map(_SRUN_TASK_ERROR.search, tail(batch, 200)) if m]
    chosen = [n for n in dict.fromkeys(failed) if n in node_logs] or list(node_logs)
    return {n: programlog.last_launch(tail(node_logs[n], lines)) for n in chosen}


def log_files(run: RunDir, node: str | None = None, job_id: str | None = None) -> list[tuple[str, Path]]:
    """(label, path): the batch log, then each node's log, an array's task by task; only
    ``node``'s if given (a node's name: its logs of every task; or a label, ``task 1/stnode2``)."""
    job_id = job_id or run.job_id
    if job_id is None:
        m = run.manifest()
        if m.get("state") == "refused":  # no job, no logs: what sbatch said is all there is
            raise UsageError(f"run {run.name} has no logs: sbatch refused its job ({m.get('refusal') or '?'}); "
                             f"fix that, then submit again")
        raise UsageError(f"run {run.name} has no job id (was it submitted?); see {run.path / 'manifest.json'}")
    nodes = run.node_logs(job_id)
    if node is not None:  # `logs` shows the batch logs as `task K/batch` (`batch`): taken too
        batches = {log_label(task, "batch"): path for task, path in run.batch_logs(job_id).items()}
        chosen = [(label, p) for label, p in {**batches, **nodes}.items() if node in (label, label.rsplit("/", 1)[-1])]
        if not chosen:
            known = ", ".join(nodes) or "none yet"
            raise UsageError(f"run {run.name}: no log for node {node!r} (nodes with logs: {known}; the batch "
                             f"log: {', '.join(batches) or 'batch'})")
        return chosen
    out = []
    for task, batch in run.batch_logs(job_id).items():
        out.append((log_label(task, "batch"), batch))
        out += [(label, p) for label, p in nodes.items() if task is None or label.startswith(log_label(task, ""))]
    return out


def follow(files: Callable[[], list[tuple[str, Path]]], finished: Callable[[], bool], out: TextIO,
           poll_s: float = 0.5, check_every_s: float = 5.0, prefix: bool = True) -> None:
    """Print what is appended to the files (the list may grow) until ``finished()``, then
    drain once more. ``finished`` is asked every ``check_every_s`` (it queries Slurm)."""
    offsets: dict[Path, int] = {}
    partial: dict[Path, str] = {}
    last_check = 0.0
    done = False
    while True:
        for label, path in files():
            try:
                with open(path, "rb") as f:
                    f.seek(offsets.get(path, 0))
                    chunk = f.read()
                    offsets[path] = f.tell()
            except FileNotFoundError:
                continue
            if not chunk:
                continue
            text = partial.pop(path, "") + chunk.decode(errors="replace")
            *complete, rest = text.split("\n")
            if rest:
                partial[path] = rest
            for line in complete:
                out.write(f"[{label}] {line}\n" if prefix else line + "\n")
            out.flush()
        if done:
            for path, rest in partial.items():
                out.write(rest + "\n")
            return
        if time.monotonic() - last_check >= check_every_s:
            last_check = time.monotonic()
            done = finished()
            if done:
                continue  # one more pass for what was written while we asked
        time.sleep(poll_s)
