"""Which checkpoint to resume from: the newest *complete* one (torch-free, no framework import).

A job killed while saving (no grace time at preemption, torchrun's 30 s, a stop timeout)
leaves a checkpoint that looks like the newest but is half written. The callbacks in
``slurmtrain.stop.hf`` and ``slurmtrain.stop.lightning`` mark a checkpoint complete with
a ``COMPLETE`` file written last, after every rank finished writing (as the built-in
trainer does); these functions skip what is not marked, with the exceptions below.
"""

from __future__ import annotations

import logging
import os
import re
import zipfile
from pathlib import Path

log = logging.getLogger("slurmtrain.stop")

MARKER = "COMPLETE"
HF_TRAINER_STATE = "trainer_state.json"  # the Trainer writes it last on rank 0
_HF_NAME = re.compile(r"^checkpoint-(\d+)$")  # transformers' PREFIX_CHECKPOINT_DIR-<global step>


def mark_complete(folder: str | os.PathLike) -> None:
    """Write the marker into ``folder`` (rank 0, after a barrier that follows every rank's
    writes). The temporary file is this process's own: where several processes take
    themselves for rank 0 (a framework that missed the launcher's world), one's rename must
    not take the file from under another's."""
    tmp = Path(folder) / f".{MARKER}.{os.getpid()}.tmp"
    tmp.write_text("")
    tmp.replace(Path(folder) / MARKER)


def hf_checkpoints(output_dir: str | os.PathLike) -> list[tuple[int, Path, bool]]:
    """``(step, folder, complete)`` for each ``checkpoint-<step>`` in ``output_dir``, newest first.

    Complete: the folder has the marker, or -- written before the callback was in use --
    it has ``trainer_state.json`` and is older than every marked one. An unmarked folder
    newer than a marked one is a save that a kill cut short.
    """
    root = Path(output_dir)
    found = []
    if root.is_dir():
        for d in root.iterdir():
            m = _HF_NAME.match(d.name)
            if m and d.is_dir():
                found.append((int(m.group(1)), d))
    found.sort(reverse=True)
    marked = [step for step, d in found if (d / MARKER).is_file()]
    oldest_marked = min(marked) if marked else None
    out = []
    for step, d in found:
        if (d / MARKER).is_file():
            complete = True
        else:
            complete = (d / HF_TRAINER_STATE).is_file() and (oldest_marked is None or step < oldest_marked)
        out.append((step, d, complete))
    return out


def newest_hf(output_dir: str | os.PathLike, warn: bool = True) -> Path | None:
    """The newest complete ``checkpoint-<step>`` folder in ``output_dir``, or None."""
    for step, d, complete in hf_checkpoints(output_dir):
        if complete:
            return d
        if warn:
            log.warning("skipping %s: incomplete (no %s marker: the save was interrupted)", d, MARKER)
    return None


def lightning_resume_point(root: str | os.PathLike) -> Path | None:
    """lightning.resume_from's answer: ``root`` itself where it is a complete ``.ckpt``; else
    the newest complete one under ``root`` (under its folder, for a ``.ckpt`` cut short)."""
    p = Path(root)
    if p.name.endswith(".ckpt") and p.exists():
        if lightning_complete(p):
            return p
        log.warning("resume_from: %s is incomplete (the save was interrupted); looking in its folder", p)
        p = p.parent
    found = newest_lightning(p)
    if found is None:
        say_none_found(p, "*.ckpt")
    return found


def lightning_complete(path: str | os.PathLike) -> bool:
    """A ``.ckpt`` file is complete when it is a whole zip archive (``torch.save``'s format;
    a copy cut short lacks the directory at its end); a ``.ckpt`` folder (sharded strategies)
    only with the marker, which the Lightning callback writes after its own saves."""
    p = Path(path)
    if p.is_dir():
        return (p / MARKER).is_file()
    try:
        return p.is_file() and zipfile.is_zipfile(p)
    except OSError:
        return False


def lightning_checkpoints(root: str | os.PathLike) -> list[tuple[float, Path, bool]]:
    """``(mtime, path, complete)`` of every ``*.ckpt`` under ``root`` (recursively, e.g.
    ``lightning_logs/version_*/checkpoints/``), newest first."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in [n for n in dirnames if n.endswith(".ckpt")]:
            dirnames.remove(name)  # a sharded checkpoint: a candidate, not a place to look in
            d = Path(dirpath) / name
            when = (d / MARKER).stat().st_mtime if (d / MARKER).is_file() else d.stat().st_mtime
            out.append((when, d, lightning_complete(d)))
        for name in filenames:
            if name.endswith(".ckpt"):
                f = Path(dirpath) / name
                try:
                    out.append((f.stat().st_mtime, f, lightning_complete(f)))
                except OSError:  # a dangling link (last.ckpt to a removed file)
                    continue
    out.sort(key=lambda t: t[0], reverse=True)
    return out


def newest_lightning(root: str | os.PathLike, warn: bool = True) -> Path | None:
    """The most recently written complete ``*.ckpt`` under ``root``, or None."""
    for _, path, complete in lightning_checkpoints(root):
        if complete:
            return path
        if warn:
            log.warning("skipping %s: incomplete (the save was interrupted)", path)
    return None


def say_none_found(root: str | os.PathLike, kind: str) -> None:
    """``resume_from(root)`` found no ``kind`` checkpoint. On a first start that is as it
    should be; said (a warning, on global rank 0) where it is likely a mistake: this run (this
    array task) reported a checkpoint before, and ``root`` is missing, or that checkpoint is
    not under ``root``, or it is gone from there."""
    p = Path(root)
    saved = _run_checkpoint()
    if saved is None:
        if not p.exists():
            log.info("resume_from: %s does not exist (yet): training from the start", p)
        return
    step, where = saved
    at = f" at {where}" if where else ""
    if where and _under(Path(where), p):
        if not Path(where).exists():
            log.warning("resume_from: the checkpoint of step %d this run saved at %s is gone (removed, or purged "
                        "from a scratch file system): training from the start", step, where)
        return  # there, but incomplete: said as it was skipped
    pass_it = ("training from the start; pass the folder the checkpoints are written under (one that does not "
               "change with the job id)")
    if not p.exists():
        log.warning("resume_from: %s does not exist, though this run saved a checkpoint of step %d%s: %s",
                    p, step, at, pass_it)
    else:
        log.warning("resume_from: no complete %s checkpoint under %s, though this run saved one of step %d%s: %s",
                    kind, p, step, at, pass_it)


def _under(path: Path, root: Path) -> bool:
    try:
        return path.resolve().is_relative_to(root.resolve())
    except OSError:
        return False


def _run_checkpoint() -> tuple[int, str | None] | None:
    """(step, path) of the latest durable checkpoint this run (this array task) reported,
    read on global rank 0 inside a slurmtrain job; None elsewhere, or before any."""
    from .. import events, stop
    from ..eventlog import Ev, of_task

    run = os.environ.get("SLURMTRAIN_RUN_DIR")
    if not run or stop.rank() != 0:
        return None
    task = os.environ.get("SLURMTRAIN_ARRAY_TASK")
    evs = of_task(events.read(run), int(task) if task and task.isdigit() else None)
    latest = next((e for e in reversed(evs) if e.get("event") in (Ev.CHECKPOINT_SAVED, Ev.STOPPED)
                   and isinstance(e.get("step"), int) and e.get("tier") != "memory"), None)
    return None if latest is None else (latest["step"], latest.get("path"))
