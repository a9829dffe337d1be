"""Commands that look at runs and stop them: runs, status, logs, cancel, sync (W&B offline folders).

submitit is imported by the library modules these commands call, inside the commands.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import datetime
from pathlib import Path
from typing import Callable

import click

from .base import main
from .refs import follow_up, resolve_run, runs_dir_option
from ..eventlog import EXIT_STOPPED, REQUEUE_LIMIT, STOP_KINDS, Ev

# Final outcomes that were no program's fault: `resubmit` continues them (runs/resubmit.py).
_GOES_ON = STOP_KINDS | {REQUEUE_LIMIT}


@main.command("runs")
@runs_dir_option
@click.option("--json", "as_json", is_flag=True, help="One JSON object per run.")
def runs_cmd(runs_dir: str, as_json: bool) -> None:
    """List the runs under --runs-dir with their Slurm state (one query to Slurm)."""
    from .. import perms
    from ..runs import rundir, track
    from ..runs.slurmquery import format_duration
    from ..tracking import short

    found = rundir.list_runs(runs_dir)
    hidden = rundir.unreadable_runs(runs_dir)
    if hidden:  # a teammate's private run in a shared runs directory
        click.echo(f"{len(hidden)} folder(s) under {os.path.abspath(runs_dir)} you cannot read, left out: "
                   + "; ".join(f"{p.name} ({perms.whose(p)})" for p in hidden[:3])
                   + (f"; and {len(hidden) - 3} more" if len(hidden) > 3 else ""), err=True)
    if not found:
        from .. import recent
        newest_first = dict.fromkeys(str(p.parent) for p in reversed(recent.known()))
        elsewhere = [d for d in newest_first if d != os.path.abspath(runs_dir)][:3]
        hint = f"; you submitted runs under {', '.join(elsewhere)} (--runs-dir DIR)" if elsewhere else ""
        click.echo(f"no runs under {os.path.abspath(runs_dir)}{hint}", err=True)
        return
    rows = track.statuses(found, with_events=False)
    from ..runs import sweeps
    for run, st in zip(found, rows):  # a sweep is one line: its points counted by state (--json: each)
        if sweeps.points(run):
            st.sweep = sweeps.rows(run, st.tasks)
            st.outcome = sweeps.counts(st.sweep)
    owners = [perms.owner(r.path) for r in found]  # who submitted each: a runs directory a team shares
    if as_json:
        for st, user in zip(rows, owners):
            click.echo(json.dumps({**st.to_json(), "user": user, "tracking": _tracking_json(st)}))
        return
    table = [("RUN", "JOB ID", "STATE", "OUTCOME", "NODES", "ELAPSED", "GOODPUT", "SUBMITTED")]
    tracked = [short(r.manifest()) for r in found]  # same order as rows
    for st in rows:
        state = st.state.value + ("*" if st.source == "events.jsonl" else "")
        outcome = st.outcome if st.outcome and st.outcome != "running" else "-"
        table.append((st.name, st.job_id or "-", state, outcome, str(st.nodes or "-"),
                      format_duration(st.elapsed_s), _share(st.goodput, st.state.is_active), _short_time(st.submitted)))
    if len(set(owners)) > 1:  # a column only where the runs are more than one person's
        table = [table[0] + ("USER",)] + [r + (u or "?",) for r, u in zip(table[1:], owners)]
    if any(tracked):  # a column only where some run tracks: W&B link / offline id, TensorBoard
        table = [table[0] + ("TRACKING",)] + [r + (t or "-",) for r, t in zip(table[1:], tracked)]
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    for r in table:
        click.echo("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    if any(st.source == "events.jsonl" for st in rows):
        click.echo("* Slurm no longer knows the job; state from the run's events.jsonl")


def _share(report: dict | None, active: bool = False) -> str:
    """A running job before its first heartbeat: not known yet (its start-up counts as
    trained until then, which would read 100%)."""
    share = (report or {}).get("share")
    if share is None or (active and not (report or {}).get("progress_known", True)):
        return "-"
    return f"{share:.0%}"


def _jobs(st) -> list[dict]:
    """The run's jobs, oldest first, by their first submission event (a resubmission writes
    `submitted` and `resubmitted` for its one new job)."""
    seen: dict[str, dict] = {}
    for e in st.events:
        if e.get("event") in (Ev.SUBMITTED, Ev.RESUBMITTED) and e.get("job_id"):
            seen.setdefault(str(e["job_id"]), e)
    return list(seen.values())


def _elapsed(st) -> str:
    """Slurm's elapsed time of the latest start and, for a run of several, its starts' time
    in all (the queue between them left out): a 14-day run of daily jobs is not "1 day"."""
    import time

    from ..eventlog import time_in_starts
    from ..runs.slurmquery import format_duration
    if st.tasks or st.sweep:
        return format_duration(st.elapsed_s)
    starts, total = time_in_starts(st.events, time.time() if st.state.is_active else None)
    if starts < 2:
        return format_duration(st.elapsed_s)
    return f"{format_duration(st.elapsed_s)} (this start); {format_duration(int(total))} in {starts} starts"


def _requeues(st) -> str:
    """Slurm's requeues of the current job, and the run's jobs where it had more than one
    (a resubmission starts a new job, whose count starts again at 0)."""
    text = "-" if st.restarts is None else str(st.restarts)
    text += _counted(st)
    jobs = _jobs(st)
    if len(jobs) > 1:
        again = len(jobs) - 1
        text += (f" in job {st.job_id}, the run's latest of {len(jobs)} jobs ({again} resubmission"
                 f"{'s' if again > 1 else ''})")
    return text


def _counted(st) -> str:
    """Where some of the job's requeues did not count toward resilience.max_requeues (a
    time limit's, after a start that moved the run on): how many did, of how many allowed."""
    import re

    from ..eventlog import free_requeues
    if not st.restarts or not st.job_id or st.tasks:
        return ""
    free = free_requeues(st.events, st.job_id)
    if not free:
        return ""
    try:
        limit = re.search(r"--max-requeues (\d+)", (Path(st.run) / "job.sbatch").read_text())
    except (OSError, TypeError):
        limit = None
    of = f" of max_requeues {limit[1]}" if limit else ""
    return f" ({st.restarts - free} counted{of}; {free} after starts that saved a newer checkpoint, not counted)"


def _submitted(st) -> str:
    """When the run began; after a resubmission, when its current job was submitted too."""
    jobs = _jobs(st)
    if len(jobs) < 2:
        return _short_time(st.submitted)
    first = datetime.fromtimestamp(jobs[0]["time"]).strftime("%Y-%m-%d %H:%M:%S")
    return f"{first} (job {jobs[0]['job_id']}); job {jobs[-1]['job_id']} at {_short_time(st.submitted)}"


def _short_time(iso: str | None) -> str:
    if not iso:
        return "-"
    try:
        return datetime.fromisoformat(iso).strftime("%Y-%m-%d %H:%M:%S")
    except ValueError:
        return iso


def _targets(refs: tuple[str, ...], runs_dir: str):
    """RUN or JOBID arguments -> run directories, or job ids no run records."""
    from ..errors import UsageError

    if not refs:
        return [resolve_run(None, runs_dir)]
    out = []
    for ref in refs:
        try:
            run = resolve_run(ref, runs_dir)
        except UsageError:
            if not ref.isdigit():
                raise
            out.append(ref)  # a job id submitted some other way: ask Slurm
            continue
        out.append(run)
    return out


@main.command()
@click.argument("refs", nargs=-1, metavar="[RUN|JOBID]...")
@runs_dir_option
@click.option("--json", "as_json", is_flag=True, help="One JSON object per run (state, exit code, events...).")
@click.option("--lines", "-n", default=20, show_default=True, type=click.IntRange(min=0), help="Log lines shown for a failed run.")
def status(refs: tuple[str, ...], runs_dir: str, as_json: bool, lines: int) -> None:
    """State, how it ended (outcome), nodes, elapsed time, exit code, requeues and history of runs.

    RUN is a run directory, a run name under --runs-dir or a unique prefix of one, a job
    id, or a job name (its latest run); default: the latest run. A job id no run records
    is asked of Slurm. For a failed run, the program's last error line and the last lines of the failing
    node's log follow.
    """
    from ..runs import track
    from ..runs.logs import script_error
    from ..runs.rundir import RunDir
    from ..runs.states import JobState

    targets = _targets(refs, runs_dir)
    for i, (target, st) in enumerate(zip(targets, track.statuses(targets))):
        if as_json:
            click.echo(json.dumps({**st.to_json(), "tracking": _tracking_json(st)}))
            continue
        if i:
            click.echo()
        failed = script_error(target, st.job_id) if isinstance(target, RunDir) and not st.state.is_active else None
        st.note = failed or st.note  # what the batch log says, over a guess ("cancelled, killed, or never started")
        _print_status(st)
        if isinstance(target, RunDir) and st.state.is_final and st.outcome in _GOES_ON:
            cli, where = follow_up(runs_dir)
            click.echo(f"{'next':<10} `{cli} resubmit {target.name}{where}` continues it from its last checkpoint")
        if st.job_id and (st.state is JobState.RUNNING or (st.state is JobState.FAILED and st.outcome == "unknown")):
            _say_if_stranded(st.job_id, st.name, st.state, st.watcher)
        # A clean stop (exit 75: saved, then stopped) at the requeue limit ends the job FAILED:
        # no program error, no launcher's report of one.
        if isinstance(target, RunDir) and st.state in (JobState.FAILED, JobState.NODE_FAIL, JobState.OUT_OF_MEMORY) \
                and st.program_exit_code != EXIT_STOPPED:
            _print_failure(target, st.job_id, lines)


def _print_failure(target, job_id: str | None, lines: int) -> None:
    """The program's own error line above each failing node's last log lines, the root
    cause's node first."""
    from ..runs import track
    from ..runs.logs import program_errors
    errors = program_errors(target, job_id)  # the program's words, above the launcher's
    logs = track.failing_node_logs(target, job_id, lines)
    for node in [*errors, *(n for n in logs if n not in errors)]:  # the root cause's node first
        tail = logs.get(node, [])
        if node in errors:
            click.echo(f"program error on {node}: {errors[node]}")
        if tail:  # none asked for (-n 0), or the launch printed nothing
            click.echo(f"last lines of {node}'s log ({target.node_logs(job_id).get(node)}):")
        for line in tail:
            click.echo(f"  {line}")


def _say_if_stranded(job_id: str, name: str, state, watched: dict | None) -> None:
    """A job whose batch host Slurm holds down, RUNNING with nothing of it left running, or
    ended FAILED without a word (Slurm 24.11): runs/resubmit.py."""
    from ..errors import SlurmError
    from ..runs.resubmit import stranded
    try:
        found = stranded(job_id, state)
    except SlurmError:
        return
    if found:
        fix = (f"the watch (pid {watched.get('pid', '?')} on {watched.get('host', '?')}) requeues it at its next "
               "poll" if watched is not None else f"`slurmtrain resubmit --watch --detach {name}` requeues it (and "
               f"keeps watching), or `scontrol requeue {job_id}`")
        click.echo(f"warning    {found}: {fix}")


def _exit_rows(st, row: Callable[[str, object], None]) -> None:
    """The job's exit code and, where it differs, the program's own."""
    row("exit code", "-" if st.exit_code is None else st.exit_code
        if not st.signal else f"{st.exit_code} (signal {st.signal})")
    if st.program_exit_code == EXIT_STOPPED:
        row("program", f"exited {EXIT_STOPPED}: stopped after saving its checkpoint, as asked")
    elif st.program_exit_code is not None and st.program_exit_code != st.exit_code:
        row("program", f"exited {st.program_exit_code} (the launcher's report in the node log; the job's "
                       "exit code is the launcher's or srun's, not the program's)")


def _print_status(st) -> None:
    from ..runs.slurmquery import format_duration

    def row(key: str, value) -> None:
        click.echo(f"{key:<10} {value}")

    row("run", f"{st.name}" + (f"  ({st.run})" if st.run else ""))
    point = _point_of(st.run)
    if point:
        row("sweep", point)
    row("job", st.job_id or "-")
    row("state", _state_text(st))
    if st.outcome and st.outcome != "running":
        row("outcome", f"{st.outcome}: {st.outcome_detail}")
    if st.note:
        row("note", st.note)
    if st.tasks:  # a job array: nodes of each task, then each task on a line
        row("nodes", f"{st.nodes or '-'} per task, {len(st.tasks)} tasks")
    else:
        row("nodes", f"{st.nodes or '-'}" + (f"  {st.nodelist}" if st.nodelist else ""))
    if st.sweep:  # a sweep: a row per point instead of the tasks' lines
        from ..runs.sweeps import counts, table
        row("sweep", counts(st.sweep))
        for i, line in enumerate(table(st.sweep)):
            click.echo(f"{'points' if i == 0 else '':<10} {line}")
    for i, t in enumerate(st.tasks if not st.sweep else []):  # an array job's tasks, one line each
        click.echo(f"{'tasks' if i == 0 else '':<10} " + _task_line(t))
    row("elapsed", _elapsed(st))
    _exit_rows(st, row)
    row("requeues", _requeues(st))
    if st.watcher is not None:
        from ..runs.watcher import describe as watched
        row("watch", f"`resubmit --watch`: {watched(st.watcher)}")
    for label, text in _goodput_rows(st.goodput, ended=st.state.is_final):
        row(label, text)
    from ..cadence import describe  # torch-free
    for label, chosen in (("ckpt", st.checkpoint_interval), ("memory", st.memory_interval)):
        if chosen:
            row(label, describe(chosen))
    _pace_rows(st, row)
    row("submitted", _submitted(st))
    for label, text in _tracking_rows(st):  # the W&B run (link or offline folders), TensorBoard
        row(label, text)
    if st.events and st.run:  # the raw events stay in --json
        from ..runs import classify

        click.echo("history")
        for line in classify.history(st.run):
            click.echo(f"  {line}")


def _pace_rows(st, row: Callable[[str, object], None]) -> None:
    """Steps trained again (a launch that did not resume from the newest checkpoint), slow
    nodes, slow stretches."""
    for b in st.behind:
        where = f" ({b['path']})" if b.get("path") else ""
        row("warning", f"a launch at {_clock(b['time'])} began at step {b['step']}, below the checkpoint of step "
            f"{b['saved']}{where} the run had saved: the program did not resume from it and trained those steps "
            "again (a folder named by job id? docs/survival.md)")
    for i, s in enumerate(st.stragglers):
        row("stragglers" if i == 0 else "", f"{s['node']}: {s['pct']}% slower than the other nodes ({s['compute_ms']} "
            f"ms against {s['others_ms']} ms for the same work), since {_clock(s['time'])}")
    if st.slow:
        from ..runs import pace

        row("slow", pace.describe(st.slow))


def _point_of(run: str | None) -> str | None:
    """For a sweep's point: which sweep, which task, and its values (the sweep's own status
    has every point's row)."""
    from ..runs.rundir import RunDir

    manifest = RunDir(Path(run)).manifest() if run else {}
    if not manifest.get("sweep_dir"):
        return None
    values = " ".join(f"{k}={v}" for k, v in (manifest.get("values") or {}).items())
    return (f"point {manifest.get('name')} (task {manifest.get('array_task')}) of sweep "
            f"{Path(manifest['sweep_dir']).name}: {values}")


_PART_WORDS = {"startup": "start-up", "checkpoint": "checkpoints", "lost": "lost steps", "hang": "hangs",
               "restart": "restarts", "spare": "idle spares", "other": "other"}


def _state_text(st) -> str:
    """The state, whose word it is, and why a job waits: Slurm's own hold of a job it (or
    we) requeued is no fault, and it ends by itself."""
    text = f"{st.state.value}  (from {st.source})" + (f"  reason: {st.reason}" if st.reason else "")
    if st.state.value == "PENDING" and st.reason == "BeginTime" and st.restarts:
        text += " (Slurm holds a requeued job for about two minutes before it may start again)"
    elif st.state.value == "PREEMPTED" and st.ended:
        text += (" (Slurm's word for a job it preempted, in this start or an earlier one, and did not requeue: "
                 "how the run ended is the outcome's)")
    elif st.state.value == "PREEMPTED":
        text += " (killed at the end of its grace time: Slurm requeues it, and it resumes from its last checkpoint)"
    elif st.state.value == "PENDING" and st.reason in _NEVER_STARTS:
        text += f" ({_NEVER_STARTS[st.reason]}: it will not start as it is; cancel it and submit it with that changed)"
    return text


# Pending reasons a job does not get past by waiting (Slurm's squeue reasons).
_NEVER_STARTS = {
    "PartitionTimeLimit": "its time limit is above the partition's MaxTime (--time)",
    "PartitionNodeLimit": "it asks for more nodes than the partition allows (--nodes)",
    "AssocMaxWallDurationPerJobLimit": "its time limit is above what the account allows (--time)",
    "InvalidAccount": "the account is not valid here (slurm.account)",
    "InvalidQOS": "the QOS is not valid here (slurm.qos)",
    "QOSMaxWallDurationPerJobLimit": "its time limit is above what the QOS allows (--time)",
    "QOSMaxNodePerJobLimit": "it asks for more nodes than the QOS allows (--nodes)",
}


def _goodput_rows(report: dict | None, ended: bool = True) -> list[tuple[str, str]]:
    """``goodput`` (the share of node time that trained kept steps, and where the rest went)
    and one ``faults`` line per interruption with what it cost (runs/goodput.py)."""
    if not report:
        return []
    allocated, parts = report["allocated_node_s"], report["node_s"]
    summed = f", summed over {report['tasks']} tasks" if report.get("tasks", 1) > 1 else ""
    queue = f"queue {_human(report['queue_s'])}{summed}" if report["queue_s"] else ""
    if not allocated:
        return [("goodput", f"- (nothing allocated{'' if ended else ' yet'}; {queue or 'queue 0 s'})")]
    if allocated < 1 and ended:  # a program that failed as it started: shares of nothing say nothing
        return [("goodput", f"- (under a second of node time: nothing to share out; {queue or 'queue 0 s'})")]
    rest = [f"{word} {parts[p] / allocated:.0%}" for p, word in _PART_WORDS.items() if parts[p] >= 0.005 * allocated]
    text = (f"{report['share']:.0%} of {_human(allocated)} of node time trained steps that were kept"
            + (f"; {', '.join(rest)}" if rest else "") + (f"; {queue}" if queue else ""))
    if not report["progress_known"]:  # a run starting up has sent none yet: not known to send none
        # Lost steps are known from the checkpoints even then; the steps' own start is not.
        lost = "" if parts.get("lost", 0) >= 0.005 * allocated else " and lost steps"
        counted = "" if parts.get("trained", 0) < 0.005 * allocated else (  # none counted: nothing to qualify
            f"; start-up{lost} count{'' if lost else 's'} as trained")
        text += (f" (no heartbeat came: the program sends none, or ended before its first step{counted})"
                 if ended else " (no heartbeat yet: until the first, start-up counts as trained)")
    rows = [("goodput", text)]
    for i, f in enumerate(report["faults"]):
        cost = dict(f["cost"])
        queued = cost.pop("queue", 0)
        said = ", ".join(f"{_PART_WORDS.get(p, p)} {_human(v)}" for p, v in cost.items() if v >= 0.5)
        where = "in the job" if f["in_job"] else "ended the start"
        text = (f"{_clock(f['time'])}  {f['kind']} ({where}): {f['detail']}; "
                f"cost {_human(sum(cost.values()))} of node time" + (f" ({said})" if said else "")
                + (f" + {_human(queued)} in the queue" if queued else ""))
        rows.append(("faults" if i == 0 else "", text))
    return rows


def _clock(t: float) -> str:
    return datetime.fromtimestamp(t).strftime("%H:%M:%S")


def _human(seconds: float) -> str:
    """``42 s``, ``3m 10s``, ``2h 05m``."""
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    return f"{s // 3600}h {s % 3600 // 60:02d}m"


def _task_line(t) -> str:
    """``task 1  FAILED  stnode2  (job 13, exit code 1)``."""
    said = [f"job {t.job_id}"] if t.job_id else []
    said += [f"exit code {t.exit_code}"] if t.exit_code is not None else []
    said += [f"from {t.source}"] if t.source == "events.jsonl" else []
    return (f"task {t.task}  {t.state.value}" + (f"  {t.nodelist}" if t.nodelist else "")
            + (f"  ({', '.join(said)})" if said else ""))


def _tracking_rows(st) -> list[tuple[str, str]]:
    from pathlib import Path

    from ..runs.rundir import RunDir
    from ..tracking import describe

    return describe(Path(st.run), RunDir(Path(st.run)).manifest()) if st.run else []


def _tracking_json(st) -> dict | None:
    return {label: text for label, text in _tracking_rows(st)} or None


@main.command()
@click.argument("ref", metavar="RUN")
@runs_dir_option
@click.option("--dry-run", is_flag=True, help="Print the wandb sync command instead of running it.")
def sync(ref: str, runs_dir: str, dry_run: bool) -> None:
    """Upload RUN's offline W&B folders (one per start, all the same W&B run) with `wandb sync`;
    a sweep's: every point's (each point is a W&B run of its own).

    Run it where the network is (a login node). RUN is a run directory, a run name under
    --runs-dir or a unique prefix of one, a job id, or a job name (its latest run).
    """
    import shlex
    import subprocess

    from ..errors import UsageError
    from ..tracking import offline_dirs, sync_command

    from ..runs.rundir import POINTS, RunDir

    run = resolve_run(ref, runs_dir)
    points = [RunDir(run.path / POINTS / p["label"]) for p in (run.manifest().get("sweep") or {}).get("points", [])]
    commands = []
    for one in points or [run]:  # a sweep: each point is a W&B run of its own
        entry = one.manifest().get("tracking") or {}
        argv = sync_command(one.path, entry)
        if argv is None:
            raise UsageError(f"run {one.name} has no offline W&B run ([tracking] wandb = true, mode = \"offline\")")
        if offline_dirs(one.path, entry["wandb"]["run_id"]):
            commands.append(argv)
        elif not points:
            raise UsageError(f"run {one.name}: no offline W&B folder under {one.path / 'wandb'} yet (has it started?)")
    if not commands:
        raise UsageError(f"sweep {run.name}: no point has an offline W&B folder yet (has it started?)")
    for argv in commands:
        click.echo(shlex.join(argv))
        if dry_run:
            continue
        try:
            code = subprocess.run(argv).returncode
        except FileNotFoundError:
            raise UsageError("wandb is not installed here: pip install wandb, then run the command above") from None
        if code:
            raise SystemExit(code)


@main.command()
@click.argument("ref", metavar="[RUN]", required=False)
@runs_dir_option
@click.option("--follow", "-f", is_flag=True, help="Keep printing new lines until the job ends.")
@click.option("--node", help="Only this node's task log (default: the batch log and every node's).")
@click.option("--job", "job", metavar="JOBID|all",
              help="Another of the run's jobs (a resubmission starts a new one; default: the latest), or all "
                   "of them, oldest first.")
def logs(ref: str | None, runs_dir: str, follow: bool, node: str | None, job: str | None) -> None:
    """Print a run's batch log and per-node logs; -f follows them until the job ends.

    RUN is a run directory, a run name under --runs-dir or a unique prefix of one, a job
    id, or a job name (its latest run); default: the latest run.
    """
    from ..runs import track

    run = resolve_run(ref, runs_dir)
    jobs = _log_jobs(run, job)
    if not follow:
        for job_id in jobs:
            for label, path in track.log_files(run, node, job_id):
                if node is None or len(jobs) > 1:
                    click.echo(f"==> {label if len(jobs) == 1 else f'job {job_id} {label}'}: {path} <==")
                if path.exists():
                    click.echo(path.read_text(errors="replace"), nl=False)
                else:
                    click.echo("(not written yet)")
        earlier = run.job_ids[:-1]
        if job is None and earlier:
            click.echo(f"(the latest of run {run.name}'s {len(earlier) + 1} jobs; the earlier ones' logs: "
                       f"--job {earlier[-1]}, or --job all)", err=True)
        return

    def finished() -> bool:
        return track.statuses([run])[0].ended

    track.follow(lambda: track.log_files(run, node, jobs[-1]), finished, sys.stdout, prefix=node is None)


def _say_dependents(run) -> None:
    """The chain's runs waiting for this one: Slurm cancels them too (they would never start)."""
    from .. import dependents, events

    waiting = [d["run"] for d in dependents.waiting(run.path) if d.get("kind") != "afterany"
               and not any(e.get("event") == Ev.STARTED for e in events.read(d.get("path", "")))]
    if waiting:
        click.echo(f"  runs waiting for it to complete ({', '.join(dict.fromkeys(waiting))}) are cancelled by Slurm "
                   "too: resubmit them after this one", err=True)


def _log_jobs(run, job: str | None) -> list[str | None]:
    """The jobs whose logs `logs --job` shows: the latest (None), one, or all."""
    from ..errors import UsageError

    if job is None:
        return [None]
    if job == "all":
        return list(run.job_ids) or [None]
    if job not in run.job_ids:
        raise UsageError(f"--job {job}: run {run.name} has no such job (its jobs: {', '.join(run.job_ids) or 'none'})")
    return [job]


@main.command()
@click.argument("refs", nargs=-1, required=True, metavar="RUN...")
@runs_dir_option
def cancel(refs: tuple[str, ...], runs_dir: str) -> None:
    """Cancel runs' jobs (scancel); they end CANCELLED, or stay as they were and the
    error says why.

    Each RUN is a run directory, a run name under --runs-dir or a unique prefix of one, a
    job id, or a job name (its latest run).
    """
    from .. import events
    from ..runs import jobs
    from ..errors import UsageError

    runs = [resolve_run(ref, runs_dir) for ref in refs]  # every name checked before any cancel
    for run in runs:
        if run.job_id is None:
            raise UsageError(f"run {run.name} has no job id to cancel (state: {run.manifest().get('state')})")
    from .. import eventlog
    from ..errors import SlurmError
    for run in runs:
        try:
            jobs.job(run.path, run.job_id).cancel()
        except SlurmError:
            ended = eventlog.latest(events.read(run.path))
            if not ended.final or ended.kind == eventlog.RUNNING:
                raise
            # Gone from Slurm, or ended there: its events say how; nothing was to be done.
            click.echo(f"run {run.name}: job {run.job_id} already ended ({ended.kind}: {ended.detail}); "
                       f"nothing to cancel", err=True)
            continue
        # Only a cancel that happened is recorded: the event makes status report the run
        # as cancelled by the user.
        from .. import perms
        events.append(run.path, Ev.CANCEL_REQUESTED, job_id=run.job_id, user=perms.me())
        tasks = f", every one of its {run.array_size} tasks" if run.array_size else ""
        click.echo(f"cancelled job {run.job_id} ({run.name}{tasks})")
        _say_dependents(run)

