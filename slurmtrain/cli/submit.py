"""Commands that put a run's job in the queue: submit (a new run), resubmit (the same run
again, in a new job; --watch keeps doing it).

submitit is imported by the library modules these commands call, inside the commands.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..errors import UsageError
from .base import main
from .options import build_job, check_deepspeed_config, job_options, refuse_missing_program, warn_about_command
from .refs import after_options, chain_of, follow_up, resolve_run, runs_dir_option


# submit's own options, each with a value: not `gen`'s.
_SUBMIT_ONLY = ("--runs-dir", "--after", "--after-ok", "--after-any")


def _without_runs_dir(argv: list[str]) -> list[str]:
    """submit's arguments as a `gen` command line: the same script, less the run directory
    and the chain's options."""
    out, skip = [], False
    for i, a in enumerate(argv):
        if a == "--":
            return out + argv[i:]
        if skip:
            skip = False
        elif a in _SUBMIT_ONLY:
            skip = True
        elif not a.startswith(tuple(f"{o}=" for o in _SUBMIT_ONLY)):
            out.append(a)
    return out


def _cadence_line(loaded, job) -> str | None:
    """What resilience.checkpoint_every = "auto" will do, for the built-in trainer (said at
    submit: the trainer chooses on the nodes, from what it measures)."""
    from ..recipes.jobcheck import trainer_args
    r, nodes = loaded.profile.resilience, loaded.profile.slurm.nodes
    if r.checkpoint_every != "auto" or trainer_args(job) is None:
        return None
    return (f"checkpoints: checkpoint_every = \"auto\": the first at the recipe's save_steps (100 if it has none), "
            f"then every sqrt(2 x the save's measured stall x {r.node_mtbf_hours / max(1, nodes):,.0f} h between "
            f"faults: node_mtbf_hours {r.node_mtbf_hours:,.0f} / {nodes} node(s), shorter as faults come); "
            "`slurmtrain status` shows each choice")


@main.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@runs_dir_option
@after_options
@job_options
def submit(runs_dir: str, after: tuple[str, ...], after_ok: tuple[str, ...], after_any: tuple[str, ...],
           **opts) -> None:
    """Submit COMMAND (or --recipe) to Slurm and record it in a new run directory.

    Takes the options of `gen` (all but --plain: a submitted job is supervised) and submits
    exactly the script `gen` prints, with the run directory filled in: runs/<name>-<stamp>/ holds job.sbatch, profile.toml,
    manifest.json, events.jsonl and logs/.

    \b
      slurmtrain submit --profile local --recipe tiny-demo
      slurmtrain submit -p aws-p4d -N 4 --name llama8b -- python train.py --lr 3e-4
      slurmtrain submit --after tokenize --recipe my.toml   # a chain: after the run "tokenize" completed
    """
    from ..runs.submit import submit as submit_job
    from ..recipes.jobcheck import check_job  # torch-free
    from ..tracking import check_installed

    loaded, job = build_job("gen", regen_args=_without_runs_dir(sys.argv[2:]), submitting=True, **opts)
    afters = chain_of(runs_dir, after, after_ok, after_any)
    # Before the run directory exists and anything is queued. In a chain the runs waited
    # for may write the corpus or checkpoint the job reads: those are checked at its start.
    recipe_notes = check_job(loaded, job, files_later=bool(afters))
    check_deepspeed_config(loaded, job)
    check_installed(loaded)  # a tracker the job's Python lacks: refused here, not on the nodes
    if not afters:  # a run waited for may write it
        refuse_missing_program(loaded, job)
    done = submit_job(loaded, job, runs_dir, after=afters)
    warn_about_command(loaded, job, recipe_notes)  # once sbatch took it: a refusal says all
    cli, hint = follow_up(runs_dir)
    from ..runs.submit import excluded_nodes
    if excluded_nodes(done.run):
        click.echo(f"excluding node(s) {excluded_nodes(done.run)}: the bad-node ledger ({cli} nodes{hint})", err=True)
    click.echo(f"submitted job {done.job_id}")
    if afters:
        from ..runs.chain import waiting_note
        click.echo(waiting_note(afters, "Dependency"))
    click.echo(f"run directory: {done.run.path}")
    if (line := _cadence_line(loaded, job)) is not None:
        click.echo(line)
    click.echo(f"follow it: {cli} status{hint} {done.run.name}; {cli} logs{hint} -f {done.run.name}")
    if loaded.profile.slurm.spare_nodes:
        click.echo(f"with spares, the job outlives any node but its batch host; to requeue it if that one dies: "
                   f"{cli} resubmit{hint} --watch --detach {done.run.name}")


@main.command()
@click.argument("ref", metavar="RUN")
@runs_dir_option
@click.option("--watch", "-w", is_flag=True,
              help="Follow the run and resubmit after each preemption, time limit or node failure "
                   "until it completes, fails by itself, or --max-resubmits is used up.")
@click.option("--max-resubmits", type=click.IntRange(min=0), default=10, show_default=True,
              help="With --watch: resubmit at most this many times.")
@click.option("--poll", "poll_s", type=click.FloatRange(min=1), default=15.0, show_default=True,
              help="With --watch: seconds between questions to Slurm.")
@click.option("--detach", is_flag=True,
              help="With --watch: watch in the background, in a session of its own (it goes on after you log "
                   "out), its output in the run directory's watch.log; `slurmtrain status` says who watches.")
@click.option("--log-name", hidden=True, default="the terminal",
              help="Where the watch's output goes, as `status` names it (set by --detach).")
@click.option("--force", is_flag=True, help="Submit again even after the run completed or failed by itself.")
@click.option("--time", "-t", "time_limit", metavar="TIME",
              help="The run's time limit from this resubmission on, e.g. 4:00:00 (sbatch's --time, in place of "
                   "the script's; kept for later resubmissions and a watch's).")
@click.option("--this-environment", "this_env", is_flag=True,
              help="Go on though variables the run was submitted with are unset in this shell (the job gets this "
                   "shell's environment).")
def resubmit(ref: str, runs_dir: str, watch: bool, max_resubmits: int, poll_s: float, detach: bool, log_name: str,
             force: bool, this_env: bool, time_limit: str | None) -> None:
    """Continue RUN in a new job from its checkpoints (for clusters that do not requeue).

    Submits the run directory's job.sbatch again; the new job writes to the same run
    directory and resumes from the newest complete checkpoint. The job id is added to
    manifest.json and recorded as a `resubmitted` event. RUN is a run directory, a run name
    under --runs-dir or a unique prefix of one, a job id, or a job name (its latest run).
    A sweep: only the points that did not complete (an array of their tasks), each going
    on in its own run directory; a point of a sweep: that point.

    \b
      slurmtrain resubmit llama8b-20261121-120000
      slurmtrain resubmit --watch llama8b        # resubmit after every stop until done
      slurmtrain resubmit --watch --detach llama8b   # ... in the background

    One watch per run: a second is refused while the first runs (both would resubmit).
    A job with spares needs a watch for one fault: its batch host's death (docs/survival.md).
    """
    from ..runs import resubmit as lib

    if detach and not watch:
        raise UsageError("--detach goes with --watch (a resubmit alone is over at once)")
    run = resolve_run(ref, runs_dir)
    # Before anything is queued (a watch resubmits from this environment too); a resubmit says
    # first why it cannot go at all (the job still running), then this.
    refuse_env = (lambda: None) if this_env else (lambda: _refuse_unset_environment(run))
    time_limit = _checked_time_limit(run, time_limit) if time_limit else None
    if not watch:
        done = lib.resubmit(run, force=force, say=lambda text: click.echo(f"slurmtrain: {text}", err=True),
                            check=refuse_env, time_limit=time_limit)
        click.echo(f"resubmitted run {done.run.name} as job {done.job_id}" + _which_points(done)
                   + (f", time limit {time_limit}" if time_limit else ""))
        return
    refuse_env()
    _watch(run, max_resubmits, poll_s, detach, log_name, time_limit)


def _watch(run, max_resubmits: int, poll_s: float, detach: bool, log_name: str, time_limit: str | None) -> None:
    """`resubmit --watch`, here or (``detach``) in a session of its own."""
    from ..runs import resubmit as lib, watcher
    if detach:
        who = watcher.detach(run, ["--max-resubmits", str(max_resubmits), "--poll", f"{poll_s:g}",
                                   *(["--time", time_limit] if time_limit else [])])
        click.echo(f"watching run {run.name} in the background: {watcher.describe(who)}; stop it with "
                   f"`kill {who.get('pid')}`")
        return
    with watcher.claim(run, log_name, warn=click.echo):
        outcome = lib.watch(run, max_resubmits=max_resubmits, poll_s=poll_s, say=click.echo, time_limit=time_limit)
    click.echo(f"run {run.name}: {outcome.kind}: {outcome.detail}")
    if outcome.kind != "completed":
        raise SystemExit(1)


def _checked_time_limit(run, value: str) -> str:
    """``--time VALUE`` checked as submit checks it, against the profile the run was submitted
    with (its stop signal's lead): Slurm's form of it, or UsageError/ConfigError (exit 2)."""
    from ..profile import load_profile
    from ..render import short_time_limit
    from .options import overrides
    profile = Path(run.sweep_dir or run.path) / "profile.toml"  # a point's: its sweep's
    # A job sbatch-ed by hand has none: its value is checked for its form only.
    loaded = load_profile(str(profile) if profile.is_file() else "local",
                          overrides(None, None, value, None, None, None, ()))
    short = short_time_limit(loaded, starts=True) if profile.is_file() else None
    if short:
        raise UsageError(f"{short}; nothing was resubmitted")
    return loaded.profile.slurm.time


def _refuse_unset_environment(run) -> None:
    from ..runs import environ
    refused = environ.refuse_unset(run.name, run.manifest().get("environment"))
    if refused:
        raise UsageError(refused)


def _which_points(done) -> str:
    """``: points lr=3e-3 (task 1)``: a sweep's points the job runs, when not all of them."""
    if done.tasks is None:
        return ""
    from ..runs.sweeps import points
    labels = [f"{p['label']} (task {p['task']})" for p in points(done.run) if p["task"] in done.tasks]
    return f": point{'s' if len(labels) > 1 else ''} {', '.join(labels)}"
