"""The run's timeline as a picture (``slurmtrain plot``): every second of the run in its
goodput part (runs/goodput.py), the faults marked, the share in the title.

:func:`layout` is the drawing as data (bars, fault marks, legend), tested without pixels;
:func:`draw` puts it on a matplotlib axis. Torch-free; matplotlib only in :func:`draw`'s
caller.
"""

from __future__ import annotations

from dataclasses import dataclass

from .goodput import Goodput

# Each part's colour and words, in legend order.
PARTS = {"queue": ("#bdbdbd", "queue"), "startup": ("#9ecae1", "start-up"), "trained": ("#31a354", "trained"),
         "checkpoint": ("#3182bd", "checkpoints"), "lost": ("#e6550d", "lost steps"), "hang": ("#756bb1", "hangs"),
         "restart": ("#fd8d3c", "restarts"), "spare": ("#d9d9d9", "idle spares"), "other": ("#636363", "other")}


@dataclass(frozen=True)
class Bar:
    part: str
    start_min: float          # minutes since the run's first second
    width_min: float
    colour: str


@dataclass(frozen=True)
class Mark:
    at_min: float
    label: str


@dataclass(frozen=True)
class Layout:
    bars: list[Bar]
    marks: list[Mark]
    legend: list[tuple[str, str]]   # (colour, words) of the parts present
    title: str


def layout(g: Goodput) -> Layout:
    if not g.spans:
        return Layout([], [], [], "no job start yet")
    t0 = min(s.begin for s in g.spans)
    bars = [Bar(s.part, (s.begin - t0) / 60, (s.end - s.begin) / 60, PARTS[s.part][0]) for s in g.spans
            if s.end > s.begin]
    present = {b.part for b in bars}
    legend = [(colour, words) for part, (colour, words) in PARTS.items() if part in present]
    marks = [Mark((f.time - t0) / 60, f.kind) for f in g.faults]
    share = "-" if g.share is None else f"{g.share:.0%}"
    title = f"goodput {share} of {g.allocated / 3600:.2f} node-hours"
    return Layout(bars, marks, legend, title)


def draw(ax, g: Goodput) -> None:
    """The timeline on ``ax``: one band, coloured by part, a line and a label per fault."""
    lay = layout(g)
    for b in lay.bars:
        ax.broken_barh([(b.start_min, b.width_min)], (0, 1), facecolors=b.colour)
    for m in lay.marks:
        ax.axvline(m.at_min, color="black", linewidth=0.8)
        ax.text(m.at_min, 1.05, m.label, rotation=45, fontsize=8, ha="left", va="bottom")
    ax.set_ylim(0, 1.6)
    ax.set_yticks([])
    ax.set_xlabel("minutes since the run was submitted")
    ax.set_title(lay.title)
    if lay.legend:
        from matplotlib.patches import Patch
        ax.legend(handles=[Patch(color=c, label=w) for c, w in lay.legend], loc="upper left", ncol=5, fontsize=7,
                  frameon=False, bbox_to_anchor=(0, -0.35))
