"""The checkpoint folder contract, whatever the engine; resumed without being asked.

Layout: ``<run_dir>/checkpoints/step_<N>/`` holds the engine's files (DCP's shards and
``.metadata``, or DeepSpeed's), a ``train_meta.json`` (recipe, model args, step) and,
written last, the ``COMPLETE`` marker. The marker appears only after every rank finished
writing (barrier, then rank 0 renames it into place), so a job killed mid-save leaves a
folder without it, which the next start skips with a warning. What goes into a folder is
the engine's (``engines.Engine.save``/``load``), with the trainer's client state: step
and data position.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import torch.distributed as dist
from torch.distributed.checkpoint import FileSystemReader

from .. import events
from ..eventlog import Ev

log = logging.getLogger("slurmtrain.train")

MARKER = "COMPLETE"
META = "train_meta.json"


def checkpoints_dir(run_dir: Path) -> Path:
    return Path(run_dir) / "checkpoints"


def _step_dirs(run_dir: Path) -> list[tuple[int, Path]]:
    """(step, folder), newest first."""
    out = []
    root = checkpoints_dir(run_dir)
    if root.is_dir():
        for d in root.iterdir():
            if d.is_dir() and d.name.startswith("step_") and d.name[5:].isdigit():
                out.append((int(d.name[5:]), d))
    return sorted(out, reverse=True)


def problem_with(ckpt: Path) -> str | None:
    """Why ``ckpt`` cannot be resumed from, or None when it looks whole."""
    if not (ckpt / MARKER).is_file():
        return "incomplete (no COMPLETE marker: the save was interrupted)"
    if _is_deepspeed(ckpt):  # DeepSpeed's own files, no DCP metadata
        return None if any(ckpt.glob("*model_states.pt")) else "corrupt (no model states)"
    try:
        md = FileSystemReader(str(ckpt)).read_metadata()
        json.loads((ckpt / META).read_text())
    except Exception as err:  # unreadable metadata: any exception means "do not use"
        return f"corrupt ({type(err).__name__}: {err})"
    sizes: dict[str, int] = {}
    for info in md.storage_data.values():
        sizes[info.relative_path] = max(sizes.get(info.relative_path, 0), info.offset + info.length)
    for name, needed in sizes.items():
        f = ckpt / name
        if not f.is_file() or f.stat().st_size < needed:
            return f"corrupt (shard {name} is missing or truncated)"
    return None


def _is_deepspeed(ckpt: Path) -> bool:
    try:
        return json.loads((ckpt / META).read_text()).get("engine") == "deepspeed"
    except (OSError, ValueError):
        return False


def newest_complete(run_dir: Path, warn: bool = True) -> tuple[int, Path] | None:
    for step, d in _step_dirs(run_dir):
        problem = problem_with(d)
        if problem is None:
            return step, d
        if warn:
            log.warning("skipping checkpoint %s: %s", d, problem)
    return None


class Checkpointer:
    """Saves and restores everything a run needs to continue exactly where it was: the
    engine's state and the data position, in one ``step_<N>`` folder each."""

    def __init__(self, run_dir: Path, engine: Any, data: Any, meta: dict[str, Any], *,
                 keep_last: int, kill_at_step: int | None = None):
        self.run_dir = Path(run_dir)
        self.engine, self.data, self.meta = engine, data, meta
        self.keep_last, self.kill_at_step = keep_last, kill_at_step
        self.rank = dist.get_rank()
        self._pending: tuple[int, Any, float] | None = None  # (step, future, start time)
        self.last_saved = -1

    # ------------------------------------------------------------------ save

    def _begin_save(self, step: int) -> Path:
        """The folder of ``step``'s save, fresh, with its meta file, once every rank is here
        (the previous save finished and marked first: one save in flight at a time)."""
        self.wait()
        path = checkpoints_dir(self.run_dir) / f"step_{step}"
        if self.rank == 0:
            if path.exists():  # left over by an interrupted save of this step
                shutil.rmtree(path)
            path.mkdir(parents=True)
            _atomic_write(path / META, json.dumps({**self.meta, "step": step}, indent=1))
        dist.barrier()
        return path

    def save(self, step: int) -> None:
        path = self._begin_save(step)
        start = time.perf_counter()
        future = self.engine.save(path, {"step": step, "data": self.data.state_dict()})
        self._pending = (step, future, start)
        if future is None:
            self.wait()
        self.last_saved = step

    def wait(self) -> None:
        """Finish the save in flight (if any): every rank done, then rank 0 writes the marker."""
        if self._pending is None:
            return
        step, future, start = self._pending
        self._pending = None
        if future is not None:
            future.result()
        dist.barrier()
        path = checkpoints_dir(self.run_dir) / f"step_{step}"
        if self.rank == 0:
            if self.kill_at_step == step:  # test hook: die with the shards written, unmarked
                log.warning("debug.kill_in_save_at_step=%d: killing rank 0 before the marker", step)
                os.kill(os.getpid(), signal.SIGKILL)
            seconds = round(time.perf_counter() - start, 3)
            _atomic_write(path / MARKER, json.dumps({"step": step, "time": time.time(),
                                                     "world_size": dist.get_world_size()}))
            events.append(self.run_dir, Ev.CHECKPOINT_SAVED, step=step, seconds=seconds)
            log.info("checkpoint saved: %s (%.2f s)", path, seconds)
            self._prune()

    def _prune(self) -> None:
        complete = [(s, d) for s, d in _step_dirs(self.run_dir) if (d / MARKER).is_file()]
        for _, d in complete[self.keep_last:]:
            shutil.rmtree(d, ignore_errors=True)
        # Unmarked folders older than the newest complete one are dead saves: drop them too.
        newest = complete[0][0] if complete else -1
        for step, d in _step_dirs(self.run_dir):
            if step < newest and not (d / MARKER).is_file():
                shutil.rmtree(d, ignore_errors=True)

    # ------------------------------------------------------------------ load

    def _choose(self) -> Path | None:
        """The newest complete checkpoint, or None. Rank 0 chooses and tells the others, so
        all ranks load the same one."""
        choice = [None]
        if self.rank == 0:
            found = newest_complete(self.run_dir)
            choice = [str(found[1]) if found else None]
        dist.broadcast_object_list(choice, src=0)
        return None if choice[0] is None else Path(choice[0])

    def resume(self) -> int:
        """Load the newest complete checkpoint, if any; return its step (0 when none)."""
        path = self._choose()
        if path is None:
            return 0
        client = self.engine.load(path, {"step": 0, "data": self.data.state_dict()})
        self.data.load_state_dict(client["data"])
        step = int(client["step"])
        self.last_saved = step
        if self.rank == 0:
            log.info("resumed from %s (step %d)", path, step)
            events.append(self.run_dir, Ev.RESUMED, step=step)
        return step


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
