"""Command: resubmit (continue a run in a new job; --watch keeps doing it).

submitit is imported by the library modules this command calls, inside the command.
"""

from __future__ import annotations

import click

from .base import main
from .runs import runs_dir_option


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
@click.option("--force", is_flag=True, help="Submit again even after the run completed or failed by itself.")
def resubmit(ref: str, runs_dir: str, watch: bool, max_resubmits: int, poll_s: float, force: bool) -> None:
    """Continue RUN in a new job from its checkpoints (for clusters that do not requeue).

    Submits the run directory's job.sbatch again; the new job writes to the same run
    directory and resumes from the newest complete checkpoint. The job id is added to
    manifest.json and recorded as a `resubmitted` event.

    \b
      slurmtrain resubmit llama8b-20261121-120000
      slurmtrain resubmit --watch llama8b        # resubmit after every stop until done
    """
    from ..runs import resubmit as lib
    from ..runs import rundir

    run = rundir.resolve(ref, runs_dir)
    if not watch:
        done = lib.resubmit(run, force=force)
        click.echo(f"resubmitted run {run.name} as job {done.job_id}")
        return
    outcome = lib.watch(run, max_resubmits=max_resubmits, poll_s=poll_s, say=click.echo)
    click.echo(f"run {run.name}: {outcome.kind}: {outcome.detail}")
    if outcome.kind != "completed":
        raise SystemExit(1)
