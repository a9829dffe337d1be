"""Commands that follow a run's training: watch (live progress), plot (metrics to a PNG).

Torch-free: they read ``metrics.jsonl``/``events.jsonl`` through
:mod:`slurmtrain.runs.progress`; matplotlib is imported only when ``plot`` runs.
"""

from __future__ import annotations

import functools
import sys
import time
from pathlib import Path

import click

from ..errors import UsageError
from .base import main
from .refs import follow_up, named_again, resolve_run, runs_dir_option


@main.command()
@click.argument("ref", metavar="[RUN]", required=False)
@runs_dir_option
@click.option("--once", is_flag=True, help="Print one snapshot and exit.")
@click.option("--interval", type=click.FloatRange(min=0.1), default=5.0, show_default=True,
              help="Seconds between refreshes.")
def watch(ref: str | None, runs_dir: str, once: bool, interval: float) -> None:
    """Follow the training of RUN: step of total, loss, tokens/s, ETA.

    Keeps going across requeues (the metrics file is appended) and stops when the
    run ends (finished, failed, cancelled, requeue limit, ...), or on Ctrl-C; exits 1
    when the run ended without finishing (--once too). RUN is a run directory, a run name
    under --runs-dir or a unique prefix of one, a job id, or a job name (its latest run);
    default: the latest run.
    """
    from ..runs import sweeps
    from ..runs.progress import progress_line, snapshot
    found = resolve_run(ref, runs_dir)
    cli, where = follow_up(runs_dir)
    points = sweeps.points(found)
    if points:  # its metrics are its points': one line each would be `status`
        labels = ", ".join(p["label"] for p in points)
        raise UsageError(f"{found.name} is a sweep: watch one of its points ({found.name}/points/LABEL; "
                         f"its points: {labels}), or see them all with `{cli} status {found.name}{where}`")
    run = found.path
    line_of = functools.partial(progress_line, cli=cli, ref=named_again(found, ref, runs_dir) + where)
    if once:
        snap = snapshot(run)
        snap = _ended_in_queue(found, snap) if snap.waiting else snap
        click.echo(line_of(snap))
        if snap.ended and not snap.finished:
            sys.exit(1)
        return
    tty, shown, asked = sys.stdout.isatty(), None, 0.0
    try:
        while True:
            snap = snapshot(run)
            if snap.waiting and time.monotonic() - asked > ASK_SLURM_S:  # a cancel while queued: Slurm's word
                asked = time.monotonic()
                snap = _ended_in_queue(found, snap)
            line = line_of(snap, note=False)
            said = line_of(snap, note=shown is None)  # why there are no metrics: said once
            if tty:
                click.echo(f"\r\033[K{said}", nl=False)
            elif line != shown:  # a log or a pipe: a line when something changed, not each interval
                click.echo(said)
            shown = line
            if snap.ended:
                break
            time.sleep(interval)
    except KeyboardInterrupt:
        snap = None
    if tty:
        click.echo()
    if snap is not None and snap.ended and not snap.finished:
        sys.exit(1)


ASK_SLURM_S = 15  # how often watch asks Slurm about a run its events say waits in the queue


def _ended_in_queue(found, snap):
    """A run waiting to start again (or at all) that Slurm ended meanwhile (a plain scancel
    writes no event): the snapshot as ended, with Slurm's outcome."""
    import dataclasses

    from ..errors import SlurmError
    from ..runs import track
    try:
        st = track.statuses([found], with_events=False)[0]
    except SlurmError:
        return snap
    if not st.ended:
        return snap
    return dataclasses.replace(snap, ended=st.outcome or st.state.value, finished=st.outcome == "completed",
                               waiting=None, news=f"{st.outcome or st.state.value}: {st.outcome_detail or ''}".rstrip(": "))


_PICTURES = (".png", ".svg", ".pdf", ".jpg", ".jpeg")


@main.command()
@click.argument("ref", metavar="[RUN]", required=False)
@runs_dir_option
@click.option("-o", "--output", "out", required=True, type=click.Path(path_type=Path),
              help="PNG file to write.")
def plot(ref: str | None, runs_dir: str, out: Path) -> None:
    """Plot loss (train and eval), learning rate and throughput of RUN against step, and
    its timeline: queue, start-up, training, checkpoints, faults, restarts (the goodput
    report of `slurmtrain status`). A run with no metrics (a program of your own) gets the
    timeline alone.

    RUN is a run directory, a run name under --runs-dir or a unique prefix of one, a job
    id, or a job name (its latest run); default: the latest run.
    """
    from .. import events
    from ..eventlog import Ev
    from ..runs import sweeps
    from ..runs.progress import plot as plot_run, read_metrics
    if out.suffix.lower() not in _PICTURES:  # matplotlib picks the format by it
        raise UsageError(f"-o {out}: a picture's name ends in {', '.join(_PICTURES)}")
    found = resolve_run(ref, runs_dir)
    run = found.path
    if sweeps.points(found):  # a sweep: its points' loss curves in one picture
        try:
            labels = sweeps.plot(found, out)
        except ModuleNotFoundError as err:
            raise UsageError(f"plot needs matplotlib ({err.name} is missing): "
                             "pip install 'slurmtrain[train]'") from None
        if not labels:  # an empty picture says nothing: say why instead
            out.unlink(missing_ok=True)
            raise UsageError(f"{found.name}: no point has metrics yet (a program of your own reports them with "
                             "slurmtrain.stop.metrics, docs/tracking.md); nothing written")
        click.echo(f"wrote {out}: " + "; ".join(labels))
        return
    evs = events.read(run)
    if not read_metrics(run)[0] and not any(e.get("event") == Ev.STARTED for e in evs):
        refused = next((e.get("message") for e in evs if e.get("event") == Ev.SUBMIT_REFUSED), None)
        why = (f"sbatch refused its job ({refused})" if refused else
               "its job has not started" if evs else "no metrics.jsonl, no events.jsonl")
        raise UsageError(f"{run}: nothing to plot yet: {why}")
    try:
        plot_run(run, out)
    except ModuleNotFoundError as err:
        raise UsageError(f"plot needs matplotlib ({err.name} is missing): "
                         "pip install 'slurmtrain[train]'") from None
    click.echo(f"wrote {out}")
