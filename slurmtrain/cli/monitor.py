"""Commands: watch (live progress of a run), plot (metrics to a PNG), demo-corpus.

Torch-free: they read ``metrics.jsonl``/``events.jsonl`` through
:mod:`slurmtrain.train.progress`; matplotlib is imported only when ``plot`` runs.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from ..errors import UsageError
from .base import main

_RUN = click.Path(path_type=Path)


def _run_dir(run: Path) -> Path:
    if not run.is_dir():
        raise UsageError(f"{run}: no such run directory")
    return run


@main.command()
@click.argument("run", type=_RUN)
@click.option("--once", is_flag=True, help="Print one snapshot and exit.")
@click.option("--interval", type=click.FloatRange(min=0.1), default=5.0, show_default=True,
              help="Seconds between refreshes.")
def watch(run: Path, once: bool, interval: float) -> None:
    """Follow the training of run directory RUN: step of total, loss, tokens/s, ETA.

    Keeps going across requeues (the metrics file is appended) and stops when the
    run ends (finished, failed, cancelled, requeue limit, ...), or on Ctrl-C; exits 1
    when the run ended without finishing.
    """
    from ..train.progress import progress_line, snapshot
    _run_dir(run)
    if once:
        click.echo(progress_line(snapshot(run)))
        return
    tty = sys.stdout.isatty()
    try:
        while True:
            snap = snapshot(run)
            line = progress_line(snap)
            click.echo(f"\r\033[K{line}" if tty else line, nl=not tty)
            if snap.ended:
                break
            time.sleep(interval)
    except KeyboardInterrupt:
        snap = None
    if tty:
        click.echo()
    if snap is not None and snap.ended and not snap.finished:
        sys.exit(1)


@main.command()
@click.argument("run", type=_RUN)
@click.option("-o", "--output", "out", required=True, type=click.Path(path_type=Path),
              help="PNG file to write.")
def plot(run: Path, out: Path) -> None:
    """Plot loss (train and eval), learning rate and throughput of RUN against step."""
    from ..train.progress import plot as plot_run, read_metrics
    _run_dir(run)
    if not read_metrics(run)[0]:
        raise UsageError(f"{run}: no training metrics yet (metrics.jsonl is missing or empty)")
    try:
        plot_run(run, out)
    except ModuleNotFoundError as err:
        raise UsageError(f"plot needs matplotlib ({err.name} is missing): "
                         "pip install 'slurmtrain[train]'") from None
    click.echo(f"wrote {out}")


@main.command("demo-corpus")
@click.argument("out", type=click.Path(path_type=Path), default="demo/corpus.jsonl")
@click.option("--max-mb", type=click.FloatRange(min=0.01), default=8.0, show_default=True,
              help="Stop after about this many megabytes.")
def demo_corpus(out: Path, max_mb: float) -> None:
    """Build a demo corpus (jsonl) from text already on this machine; downloads nothing.

    OUT defaults to demo/corpus.jsonl, where the tiny-demo recipe looks when the
    trainer starts in the same directory.
    """
    from ..train.demo_corpus import write_demo_corpus
    n_docs, n_bytes = write_demo_corpus(out, int(max_mb * 1e6))
    if n_docs == 0:
        raise UsageError("found no text on this machine to build a corpus from")
    click.echo(f"wrote {out}: {n_docs} documents, {n_bytes / 1e6:.1f} MB")
