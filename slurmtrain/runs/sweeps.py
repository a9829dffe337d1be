"""Seeing a sweep (slurmtrain/sweep.py): one row per point for ``status``, the counts by
state for ``runs``, the points' loss curves in one picture for ``plot``.

A sweep's run directory holds ``points/<label>/``, each a run directory of its own
(metrics, checkpoints, events) written by the array task of that point. Torch-free.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from .. import events
from . import goodput
from .progress import read_metrics
from .rundir import POINTS, RunDir


def points(run: RunDir) -> list[dict[str, Any]]:
    """The manifest's points: ``{task, label, values}``; [] for a run that is no sweep."""
    return (run.manifest().get("sweep") or {}).get("points") or []


def rows(run: RunDir, tasks: list[Any]) -> list[dict[str, Any]]:
    """Each point's values, its task's state (``tasks``: the RunStatus's TaskStatus list),
    its last step of the total, last train and eval loss, and its goodput share."""
    state = {t.task: t.state.value for t in tasks}
    out = []
    for point in points(run):
        folder = run.path / POINTS / point["label"]
        train, evals = read_metrics(folder)
        last = train[-1] if train else {}
        report = goodput.of_events(events.read(folder))
        out.append({"task": point["task"], "label": point["label"], "values": point["values"],
                    "state": state.get(point["task"], "-"), "step": last.get("step"),
                    "total_steps": last.get("total_steps"), "loss": last.get("loss"),
                    "eval_loss": evals[-1]["eval_loss"] if evals else None,
                    "goodput": report.to_json().get("share") if report.spans else None,
                    "run_dir": str(folder)})
    return out


def counts(rows_: list[dict[str, Any]]) -> str:
    """``3 points: 2 COMPLETED, 1 RUNNING``."""
    by = Counter(r["state"] for r in rows_)
    return f"{len(rows_)} points: " + ", ".join(f"{n} {s}" for s, n in sorted(by.items(), key=lambda kv: -kv[1]))


def table(rows_: list[dict[str, Any]]) -> list[str]:
    """The rows as aligned text lines, a header first."""
    keys = list(rows_[0]["values"]) if rows_ else []
    head = ["TASK", *[k.rsplit(".", 1)[-1].upper() for k in keys], "STATE", "STEP", "LOSS", "EVAL", "GOODPUT"]
    lines = [head]
    for r in rows_:
        step = "-" if r["step"] is None else f"{r['step']}/{r['total_steps'] or '?'}"
        lines.append([str(r["task"]), *[str(r["values"][k]) for k in keys], r["state"], step,
                      _num(r["loss"]), _num(r["eval_loss"]),
                      "-" if r["goodput"] is None else f"{r['goodput']:.0%}"])
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    return ["  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in lines]


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def plot(run: RunDir, out: Path) -> list[str]:
    """Every point's train loss (lines) and eval loss (dots, same colour) against step in
    one PNG, with a legend of the values; returns the legend's labels."""
    import matplotlib
    matplotlib.use("Agg")  # no display on a login node
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 1, figsize=(8, 5))
    labels = []
    for point in points(run):
        train, evals = read_metrics(run.path / POINTS / point["label"])
        if not train:
            continue
        label = ", ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in point["values"].items())
        line, = ax.plot([r["step"] for r in train], [r.get("loss") for r in train], label=label)
        if evals:
            ax.plot([r["step"] for r in evals], [r["eval_loss"] for r in evals], "o", color=line.get_color())
        labels.append(label)
    ax.set_xlabel("step")
    ax.set_ylabel("loss (lines: train, dots: eval)")
    ax.grid(alpha=0.3)
    if labels:
        ax.legend(title="point")
    ax.set_title(f"sweep {run.name}")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return labels
