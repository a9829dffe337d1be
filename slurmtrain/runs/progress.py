"""Reading a run's ``metrics.jsonl``: progress lines and plots. Torch-free:
``slurmtrain watch`` and ``slurmtrain plot`` run on a login node.

The file is appended across requeues, so after a resume some steps appear twice (the
steps between the last checkpoint and the preemption were trained again). The latest
record of a step wins.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import eventlog
from ..runfiles import METRICS_FILE
from .rundir import MANIFEST, PROFILE, RunDir, events_of


def read_metrics(run_dir: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(train records, eval records), one per step (the latest wins), in step order. The
    one reader of ``metrics.jsonl``: a line cut short by a killed job, bytes that are not
    UTF-8, a record that is not an object or has no integer step are skipped."""
    train: dict[int, dict[str, Any]] = {}
    evals: dict[int, dict[str, Any]] = {}
    path = Path(run_dir) / METRICS_FILE
    try:
        text = path.read_text(errors="replace")
    except OSError:
        text = ""
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        step = rec.get("step") if isinstance(rec, dict) else None
        if not isinstance(step, int) or isinstance(step, bool):
            continue
        (evals if "eval_loss" in rec else train)[step] = rec
    return [train[k] for k in sorted(train)], [evals[k] for k in sorted(evals)]


def last_step(run_dir: Path) -> int:
    """The highest step in ``metrics.jsonl``, train or eval record (0: none)."""
    train, evals = read_metrics(run_dir)
    return max([r["step"] for r in train + evals], default=0)


@dataclass(frozen=True)
class Snapshot:
    step: int | None
    total: int | None
    loss: float | None
    eval_loss: float | None
    tokens_per_s: float | None
    eta_s: float | None
    finished: bool             # the run completed (eventlog's outcome, as `slurmtrain status` says)
    ended: str | None = None   # how the run ended for good (an outcome kind: "user error", ...), if it did
    news: str | None = None    # the history's latest line (`slurmtrain status`'s words), for a run with no metrics
    saved: int | None = None   # the step of the latest checkpoint the events record
    trainer: bool = False      # the built-in trainer's run (it writes metrics once it trains)
    waiting: str | None = None  # why no step runs now: queued, or stopped and queued to start again
    starts_left: int | None = None  # the starts after this one the ETA needs at the job's time limit


def snapshot(run_dir: Path) -> Snapshot:
    train, evals = read_metrics(run_dir)
    # The same outcome `slurmtrain status` gives: a requeue is no end, a resubmission
    # carries on, a program's `finished` followed by the script's `failed` is a failure.
    evs = events_of(run_dir)  # a sweep's point: its own task's, as a run of its own
    outcome = eventlog.latest(evs)
    ended = outcome.kind if outcome.final else None
    waiting = None
    if not outcome.final and outcome.kind != eventlog.RUNNING:  # stopped, requeued: its last ETA is stale
        waiting = f"{outcome.kind}, waiting in the queue to start again"
    elif outcome.kind == eventlog.RUNNING and not eventlog.tasks(evs):
        starts = eventlog.split(evs)
        waiting = "waiting in the queue" if starts and starts[-1].started is None else None
    manifest = RunDir(run_dir).manifest() if (run_dir / MANIFEST).is_file() else {}
    if manifest.get("sweep_dir"):  # a point: what runs is the sweep's
        manifest = RunDir(Path(manifest["sweep_dir"])).manifest()
    trainer = bool(manifest.get("recipe")) or "slurmtrain.train" in (manifest.get("command") or [])
    news = None
    if not train:  # a program of the user's: what its events say is all there is to follow
        from .classify import history
        news = (history(run_dir) or [None])[-1]
    last = train[-1] if train else {}
    step, total = last.get("step"), last.get("total_steps")
    eta = None
    if step is not None and total and last.get("step_time") is not None:
        eta = max(total - step, 0) * last["step_time"]
    more = _starts_left(run_dir, manifest, evs, eta) if outcome.kind == eventlog.RUNNING and not waiting else None
    return Snapshot(step=step, total=total, loss=last.get("loss"),
                    eval_loss=evals[-1]["eval_loss"] if evals else None,
                    tokens_per_s=last.get("tokens_per_s"), eta_s=eta, finished=ended == eventlog.COMPLETED,
                    ended=ended, news=news, saved=outcome.step, trainer=trainer, waiting=waiting, starts_left=more)


def _starts_left(run_dir: Path, manifest: dict[str, Any], evs: list[dict[str, Any]], eta: float | None,
                 now: float | None = None) -> int | None:
    """How many more starts the training left (``eta`` seconds) needs past this job's time
    limit (resubmit --time's, else the profile's slurm.time); None where none is known, or
    where this start will do."""
    import math
    import time

    from .._toml import tomllib
    from ..profile import limit_seconds
    limit = manifest.get("time_limit")
    if not limit:
        try:
            limit = tomllib.loads((run_dir / PROFILE).read_text()).get("slurm", {}).get("time")
        except (OSError, ValueError):
            return None
    try:
        seconds = (limit_seconds(str(limit)) or (None,))[0] if limit else None
    except ValueError:
        return None
    starts = eventlog.split(evs)
    began = (starts[-1].started or {}).get("time") if starts else None
    if eta is None or not seconds or not isinstance(began, (int, float)):
        return None
    left = seconds - ((time.time() if now is None else now) - began)
    return math.ceil((eta - left) / seconds) if eta > left else None


def _duration(seconds: float) -> str:
    s = int(round(seconds))
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


def _no_metrics(logs: str) -> str:
    return ("no metrics: a program reports them with slurmtrain.stop.metrics(step, total, loss=...) "
            f"(docs/tracking.md); `{logs}` follows any program's output")


def progress_line(snap: Snapshot, note: bool = True, cli: str = "slurmtrain", ref: str = "") -> str:
    """``note``: say once why a program of the user's shows no metrics (watch: its first line).
    ``cli``, ``ref``: how the hints name the command and the run (``cli.refs.follow_up``: from a
    laptop, ``slurmtrain --remote NAME``; `` RUN --runs-dir DIR``)."""
    see = f"see `{cli} status{ref}`"
    if snap.step is None:
        if snap.finished:
            return "no metrics; finished"
        if snap.ended:
            return f"no metrics; ended: {snap.ended} ({see})"
        # The built-in trainer writes metrics.jsonl; a program of the user's writes none, so its
        # events say what there is: the latest of its history, its latest checkpoint.
        saved = f"; last checkpoint at step {snap.saved}" if snap.saved is not None else ""
        news = f"{snap.news}{saved}" if snap.news else "not started yet"
        if snap.trainer:
            return news + ("" if snap.news else "; the trainer's metrics come with its first steps")
        return f"{news} ({_no_metrics(f'{cli} logs -f{ref}')})" if note else news
    parts = [f"step {snap.step}" + (f"/{snap.total}" if snap.total else "")]
    if snap.total:
        parts[0] += f" ({100 * snap.step / snap.total:.0f}%)"
    if snap.loss is not None:
        parts.append(f"loss {snap.loss:.4f}")
    if snap.eval_loss is not None:
        parts.append(f"eval {snap.eval_loss:.4f}")
    if snap.tokens_per_s is not None:
        parts.append(f"{snap.tokens_per_s:,.0f} tok/s")
    if snap.finished:
        parts.append("finished")
    elif snap.ended:
        parts.append(f"ended: {snap.ended} ({see})")
    elif snap.waiting:
        parts.append(snap.waiting)
    elif snap.eta_s is not None:
        more = (f" of training, {snap.starts_left} more start{'s' if snap.starts_left > 1 else ''} at the job's "
                "time limit (and their waits in the queue)") if snap.starts_left else ""
        parts.append(f"ETA {_duration(snap.eta_s)}{more}")
    return " | ".join(parts)


def plot(run_dir: Path, out: Path) -> None:
    """Loss (train and eval), learning rate and throughput against step, and the run's
    timeline (goodput's parts and faults) below, as one PNG; the timeline alone for a run
    with events but no metrics (a program of the user's writes none)."""
    import matplotlib
    matplotlib.use("Agg")  # no display on a login node
    import matplotlib.pyplot as plt

    from . import goodput, goodput_plot

    report = goodput.of_events(events_of(run_dir))
    train, evals = read_metrics(run_dir)
    if not train:
        fig, ax = plt.subplots(1, 1, figsize=(8, 2.6))
        goodput_plot.draw(ax, report)
        fig.suptitle(str(run_dir))
        fig.tight_layout()
        fig.savefig(out, dpi=100)
        plt.close(fig)
        return
    steps = [r["step"] for r in train]
    fig = plt.figure(figsize=(8, 11.5))
    grid = fig.add_gridspec(4, 1, height_ratios=[3, 3, 3, 1.6])
    ax_loss = fig.add_subplot(grid[0])
    ax_lr = fig.add_subplot(grid[1], sharex=ax_loss)
    ax_tp = fig.add_subplot(grid[2], sharex=ax_loss)
    goodput_plot.draw(fig.add_subplot(grid[3]), report)
    ax_loss.plot(steps, [r.get("loss") for r in train], label="train")
    if evals:
        ax_loss.plot([r["step"] for r in evals], [r["eval_loss"] for r in evals], "o-", label="eval")
    ax_loss.set_ylabel("loss")
    ax_loss.legend()
    ax_lr.plot(steps, [r.get("lr") for r in train])
    ax_lr.set_ylabel("learning rate")
    ax_tp.plot(steps, [r.get("tokens_per_s") for r in train])
    ax_tp.set_ylabel("tokens/s")
    ax_tp.set_xlabel("step")
    for ax in (ax_loss, ax_lr, ax_tp):
        ax.grid(alpha=0.3)
    fig.suptitle(str(run_dir))
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
