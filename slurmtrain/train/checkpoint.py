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
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch.distributed as dist
from torch.distributed.checkpoint import FileSystemReader

from .. import events, heartbeat
from ..errors import ConfigError
from ..runfiles import CHECKPOINTS
from ..eventlog import Ev
from .memtier import MemoryTier

log = logging.getLogger("slurmtrain.train")

MARKER = "COMPLETE"
META = "train_meta.json"
SLOW_SAVE_S = 15.0  # debug.slow_save_at_step: how much longer that background save takes


def checkpoints_dir(run_dir: Path) -> Path:
    return Path(run_dir) / CHECKPOINTS


_UNREMOVABLE: set[Path] = set()  # said once each


def _remove(folder: Path) -> None:
    """A pruned checkpoint folder gone; one that cannot be (a teammate's, made under umask
    022) said once, not left silently beyond keep_last."""
    shutil.rmtree(folder, ignore_errors=True)
    if folder.exists() and folder not in _UNREMOVABLE:
        _UNREMOVABLE.add(folder)
        from .. import perms
        log.warning("could not remove %s, beyond train.keep_last (%s): it stays, taking its space",
                    folder, perms.explain(folder))


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


def _check_same_model(ckpt: Path, meta: dict[str, Any]) -> None:
    """The checkpoint holds the model this run builds: a recipe edited since (a layer more,
    a wider model) would fail in the load with a missing tensor's name only. Keys one side
    lacks (an older checkpoint) are not judged; a world size or layout may change."""
    try:
        saved = json.loads((ckpt / META).read_text()).get("model_args") or {}
    except (OSError, ValueError):
        return  # problem_with judged it whole; the load says what is wrong
    now = meta.get("model_args") or {}
    changed = [f"{k} {saved[k]} -> {now[k]}" for k in sorted(set(saved) & set(now)) if saved[k] != now[k]]
    if changed:
        where = meta.get("recipe_source") or "the recipe"
        raise ConfigError(str(where), "model", f"the run's checkpoint {ckpt} was saved by another model "
                          f"({', '.join(changed)}): the recipe changed since; put it back to resume, or start "
                          "a new run")


# What decides which tokens each step sees and how many: changed at a resume, the run goes
# on, but no longer as it would have uninterrupted (nor as its own recipe says it began).
_DATA_KEYS = (("train", "global_batch_size"), ("train", "seed"), ("data", "path"), ("data", "max_seq_len"),
              ("data", "seed"), ("data", "val_fraction"))


def data_changes(ckpt: Path, meta: dict[str, Any]) -> list[str]:
    """``data.max_seq_len 64 -> 128``, ...: the recipe keys that decide the data, changed since
    the checkpoint was saved (keys one side lacks are not judged)."""
    try:
        saved = json.loads((ckpt / META).read_text()).get("recipe") or {}
    except (OSError, ValueError):
        return []
    now = meta.get("recipe") or {}
    out = []
    for section, key in _DATA_KEYS:
        a, b = (saved.get(section) or {}).get(key), (now.get(section) or {}).get(key)
        if a is not None and b is not None and a != b:
            out.append(f"{section}.{key} {a} -> {b}")
    return out


def schedule_changes(ckpt: Path, meta: dict[str, Any]) -> list[str]:
    """``train.steps 1800 -> 2200``, ...: the optimizer's and schedule's recipe keys changed
    since the checkpoint was saved (the checkpoint would bring back the old values)."""
    from .optim import SCHEDULE_KEYS
    try:
        saved = (json.loads((ckpt / META).read_text()).get("recipe") or {}).get("train") or {}
    except (OSError, ValueError):
        return []
    now = (meta.get("recipe") or {}).get("train") or {}
    return [f"train.{k} {saved[k]} -> {now[k]}" for k in SCHEDULE_KEYS
            if saved.get(k) is not None and now.get(k) is not None and saved[k] != now[k]]


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
                 keep_last: int, kill_at_step: int | None = None, slow_at_step: int | None = None,
                 memory: MemoryTier | None = None):
        self.run_dir = Path(run_dir)
        self.memory = memory  # train.memory_steps: copies in node memory between the durable saves
        self.engine, self.data, self.meta = engine, data, meta
        self.keep_last, self.kill_at_step, self.slow_at_step = keep_last, kill_at_step, slow_at_step
        self.rank = dist.get_rank()
        self._pending: _Save | None = None  # the save in flight (one at a time)
        self.last_saved = -1  # the newest durable save's step (begun), or the one resumed from
        self.last_kept = -1   # the newest copy in node memory (train.memory_steps), or the one resumed from
        self._memory_off_said = False

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
        """Save ``step``. A synchronous save is complete when this returns; a background one
        (``train.async_save``) only holds the loop while DCP copies the state, and is marked
        complete by rank 0 as soon as DCP has finished it (below), whatever the loop does."""
        with heartbeat.busy("save"):
            self._save(step)

    def _save(self, step: int) -> None:
        path = self._begin_save(step)
        start = time.perf_counter()
        future = self.engine.save(path, {"step": step, "data": self.data.state_dict()})
        if future is not None and step == self.slow_at_step:  # test hook: a slow file system
            log.warning("debug.slow_save_at_step=%d: this save takes %.0f s longer", step, SLOW_SAVE_S)
            future = _late(future, SLOW_SAVE_S)
        self._pending = _Save(step, path, start, time.perf_counter() - start, future)
        self.last_saved = step
        if future is None:
            self.wait()
        else:
            future.add_done_callback(lambda f, save=self._pending: self._finished_in_background(save, f))

    def _finished_in_background(self, save: "_Save", future: Any) -> None:
        # DCP's own last step gathers every rank's writes and writes its metadata before
        # any rank's future completes: rank 0 may mark the folder without asking the others.
        try:
            if self.rank == 0 and future.exception() is None:
                self._mark(save)
        except Exception as e:  # noqa: BLE001  (this thread is DCP's: the loop raises it, in wait)
            save.error = e
        finally:
            save.marked.set()

    def wait(self) -> None:
        """Finish the save in flight (if any), marked complete; a failed background save
        raises its error here."""
        save, self._pending = self._pending, None
        if save is None:
            return
        if save.future is not None:
            with heartbeat.busy("save"):
                save.future.result()
                save.marked.wait()
            if save.error is not None:
                raise save.error
            return
        dist.barrier()  # every rank has written its shards
        if self.rank == 0:
            self._mark(save)

    def _mark(self, save: "_Save") -> None:
        """Rank 0: the COMPLETE marker, the event and the pruning of older saves."""
        if self.kill_at_step == save.step:  # test hook: die with the shards written, unmarked
            log.warning("debug.kill_in_save_at_step=%d: killing rank 0 before the marker", save.step)
            os.kill(os.getpid(), signal.SIGKILL)
        seconds = time.perf_counter() - save.start
        stall = seconds if save.future is None else save.stall
        _atomic_write(save.path / MARKER, json.dumps({"step": save.step, "time": time.time(),
                                                      "world_size": dist.get_world_size()}))
        events.append(self.run_dir, Ev.CHECKPOINT_SAVED, step=save.step, seconds=round(seconds, 3),
                      stall=round(stall, 3))
        log.info("checkpoint saved: %s (%.2f s, training held %.2f s)", save.path, seconds, stall)
        self._prune()

    def _prune(self) -> None:
        complete = [(s, d) for s, d in _step_dirs(self.run_dir) if (d / MARKER).is_file()]
        for _, d in complete[self.keep_last:]:
            _remove(d)
        # Unmarked folders older than the newest complete one are dead saves: drop them too.
        newest = complete[0][0] if complete else -1
        for step, d in _step_dirs(self.run_dir):
            if step < newest and not (d / MARKER).is_file():
                _remove(d)

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
        """Load the newest checkpoint, if any: a copy in node memory (an in-job restart) as
        new as the newest complete durable one, else that one; return its step (0: none)."""
        path = self._choose()
        changed = []
        if path is not None:
            _check_same_model(path, self.meta)
            changed = data_changes(path, self.meta)
            if changed and self.rank == 0:
                log.warning("resuming %s with another data recipe than it was saved with (%s): the run goes on, "
                            "but not as it would have uninterrupted", path, ", ".join(changed))
        durable = int(path.name[len("step_"):]) if path is not None else -1
        self.last_saved = durable
        template = {"step": 0, "data": self.data.state_dict()}
        began = time.perf_counter()
        got = self.memory.restore(template, durable) if self.memory is not None else None
        if got is not None:
            step, from_peer, client = got
            self.last_kept = step
            source, fields = "node memory", {"tier": "memory", "from_peer": from_peer}
            source += f" (ranks {' '.join(map(str, from_peer))} from a peer node's copy)" if from_peer else ""
        elif path is not None:
            step, source, fields, client = durable, str(path), {}, self.engine.load(path, template)
        else:
            self._none_found()
            return 0
        self.data.load_state_dict(client["data"])
        seconds = round(time.perf_counter() - began, 3)
        schedule = self._follow_recipe(path)
        if self.rank == 0:
            log.info("resumed from %s (step %d) in %.2f s", source, step, seconds)
            events.append(self.run_dir, Ev.RESUMED, step=step, seconds=seconds, **fields,
                          **({"data_changed": ", ".join(changed)} if changed else {}),
                          **({"schedule_changed": ", ".join(schedule)} if schedule else {}))
        return step

    def _none_found(self) -> None:
        """A run whose history has saves, with none left to resume from (its checkpoints
        removed, or purged from a scratch file system): it trains from step 0, said."""
        from ..eventlog import best_saved_step
        saved = best_saved_step(events.read(self.run_dir)) if self.rank == 0 else None
        if saved is not None:
            log.warning("no complete checkpoint in %s, though this run saved checkpoints up to step %d (removed, "
                        "or purged?): it trains again from step 0", checkpoints_dir(self.run_dir), saved)

    def _follow_recipe(self, path: Path | None) -> list[str]:
        """The recipe's optimizer and schedule values, where they changed since ``path`` was
        saved: the run goes on with them from the step reached (said), not with the old ones
        the checkpoint brought back (the learning rate once kept to the old length unsaid)."""
        changed = schedule_changes(path, self.meta) if path is not None else []
        if changed:
            from .optim import follow_recipe
            follow_recipe(self.engine.scheduler, self.meta["recipe"]["train"])
            if self.rank == 0:
                log.warning("resuming with the recipe's optimizer settings, changed since %s was saved (%s): "
                            "the learning rate follows them from this step on", path.name, ", ".join(changed))
        return changed

    def keep_in_memory(self, step: int) -> None:
        """train.memory_steps: ``step`` into node memory, here and on the next node (the
        loop waits for the state to be taken; the write and the send go on beside it)."""
        with heartbeat.busy("save"):
            self.memory.keep(step, {"step": step, "data": self.data.state_dict()})
        if self._say_memory_off():
            return
        self.last_kept = step

    def clear_memory(self) -> None:
        """The run finished or stopped: its copies in node memory go (a collective)."""
        if self.memory is not None:
            self.memory.clear()
            self._say_memory_off()

    def copies_in_memory(self) -> bool:
        """Copies into node memory go on: a tier, and not turned off by a copy that could not
        be written (said once, as soon as it is seen)."""
        return self.memory is not None and not self._say_memory_off()

    def _say_memory_off(self) -> bool:
        """The tier turned itself off (a copy could not be written): said once, by rank 0, in
        the log and as an event; training goes on with the durable saves."""
        off = self.memory.off if self.memory is not None else None
        if off is None or self._memory_off_said:
            return off is not None
        self._memory_off_said = True
        if self.rank == 0:
            step, error = off
            log.warning("no more copies in node memory this launch: the copy of step %d could not be written (%s); "
                        "durable checkpoints go on (a larger /dev/shm, or train.memory_steps = 0)", step, error)
            events.append(self.run_dir, Ev.MEMORY_OFF, step=step, error=error)
        return True


@dataclass
class _Save:
    step: int
    path: Path
    start: float                 # time.perf_counter() when the engine's save began
    stall: float                 # seconds the engine's save call held the training loop
    future: Any                  # a background save's (concurrent.futures.Future), else None
    marked: threading.Event = field(default_factory=threading.Event)
    error: Exception | None = None  # what marking it in the background raised


def _late(future: Future, seconds: float) -> Future:
    """``future``, done no sooner than ``seconds`` from now."""
    late: Future = Future()

    def finish() -> None:
        try:
            late.set_result(future.result())
        except BaseException as e:  # noqa: BLE001  (handed on to whoever waits)
            late.set_exception(e)
    timer = threading.Timer(seconds, finish)
    timer.daemon = True
    timer.start()
    return late


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
