"""Sharded checkpoints with torch.distributed.checkpoint (DCP), resumed without being asked.

Layout: ``<run_dir>/checkpoints/step_<N>/`` holds DCP's shards and ``.metadata``, a
``train_meta.json`` (recipe, model args, step) and, written last, the ``COMPLETE`` marker.
The marker appears only after every rank finished writing (barrier, then rank 0 renames
it into place), so a job killed mid-save leaves a folder without it, which the next start
skips with a warning. Checkpointed state: model and optimizer (sharded, via
``get_state_dict``), LR scheduler, data position, step, and each rank's RNG states.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import shutil
import signal
import time
import warnings
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions, get_model_state_dict, get_optimizer_state_dict, set_model_state_dict, set_optimizer_state_dict)
from torch.distributed.checkpoint.stateful import Stateful

from .. import events

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


class _ModelState(Stateful):
    def __init__(self, model: torch.nn.Module):
        self.model = model

    def state_dict(self) -> dict[str, Any]:
        return get_model_state_dict(self.model)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        set_model_state_dict(self.model, state)


class _OptimState(Stateful):
    """The optimizer's state keyed by parameter name, hyper-parameters included
    (``state.<name>.exp_avg``, ``param_groups.<name>.lr``): no key depends on which
    parameters a rank holds, so a checkpoint loads on another pipeline layout.
    ``flatten=False`` reads checkpoints saved before (``param_groups.0.params``: the names
    one rank held, which differ between pipeline stages)."""

    def __init__(self, model: torch.nn.Module, optim: torch.optim.Optimizer, flatten: bool = True):
        self.model, self.optim = model, optim
        self.options = StateDictOptions(flatten_optimizer_state_dict=flatten)

    def state_dict(self) -> dict[str, Any]:
        return get_optimizer_state_dict(self.model, self.optim, options=self.options)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        set_optimizer_state_dict(self.model, self.optim, state, options=self.options)


def _rng_state() -> dict[str, Any]:
    state = {"torch": torch.get_rng_state(), "python": repr(random.getstate())}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    import ast
    torch.set_rng_state(state["torch"])
    random.setstate(ast.literal_eval(state["python"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


class Checkpointer:
    """Saves and restores everything a run needs to continue exactly where it was."""

    def __init__(self, run_dir: Path, model: torch.nn.Module, optim: torch.optim.Optimizer,
                 scheduler: Any, data: Any, meta: dict[str, Any], *, keep_last: int,
                 async_save: bool, kill_at_step: int | None = None):
        self.run_dir = Path(run_dir)
        self.model, self.optim, self.scheduler, self.data = model, optim, scheduler, data
        self.meta = meta
        self.keep_last, self.async_save, self.kill_at_step = keep_last, async_save, kill_at_step
        self.rank = dist.get_rank()
        self._pending: tuple[int, Any, float] | None = None  # (step, future, start time)
        self._async_pg = dist.new_group(backend="gloo") if async_save else None
        self.last_saved = -1

    def _state(self, step: int) -> dict[str, Any]:
        return {
            "model": _ModelState(self.model),
            "optim": _OptimState(self.model, self.optim),
            "train": {"step": step, "data": self.data.state_dict(),
                      "scheduler": self.scheduler.state_dict()},
            "rng": {f"rank{self.rank}": _rng_state()},
        }

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
        if self.async_save:
            future = dcp.async_save(self._state(step), checkpoint_id=str(path),
                                    process_group=self._async_pg)
            self._pending = (step, future, start)
        else:
            dcp.save(self._state(step), checkpoint_id=str(path))
            self._pending = (step, None, start)
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
            events.append(self.run_dir, "checkpoint_saved", step=step, seconds=seconds)
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
        state = self._state(0)
        available = FileSystemReader(str(path)).read_metadata().state_dict_metadata
        if not any(k.startswith(f"rng.rank{self.rank}.") for k in available):
            # Saved with fewer ranks: this rank keeps its fresh RNG state.
            log.warning("checkpoint %s has no RNG state for rank %d", path, self.rank)
            del state["rng"]
        if any(re.match(r"optim\.param_groups\.\d+\.", k) for k in available):
            state["optim"] = _OptimState(self.model, self.optim, flatten=False)  # older format
        dcp.load(state, checkpoint_id=str(path))
        self.data.load_state_dict(state["train"]["data"])
        self.scheduler.load_state_dict(state["train"]["scheduler"])
        if "rng" in state:
            _set_rng_state(state["rng"][f"rank{self.rank}"])
        step = int(state["train"]["step"])
        self.last_saved = step
        if self.rank == 0:
            log.info("resumed from %s (step %d)", path, step)
            events.append(self.run_dir, "resumed", step=step)
        return step


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def model_args_dict(args: Any) -> dict[str, Any]:
    return asdict(args)


def load_consolidated(run_dir: str | os.PathLike):
    """(ModelArgs, full model state dict on CPU) from the newest complete checkpoint.

    Needs no process group: DCP reads every shard into this process. Used by
    ``slurmtrain export``.
    """
    from ..errors import ConfigError
    from .presets import ModelArgs
    found = newest_complete(Path(run_dir))
    if found is None:
        raise ConfigError(str(run_dir), "", "no complete checkpoint in "
                          f"{checkpoints_dir(Path(run_dir))}")
    step, path = found
    meta = json.loads((path / META).read_text())
    args = ModelArgs(**meta["model_args"])
    if meta.get("engine") == "deepspeed":  # ZeRO shards gathered by DeepSpeed's own tool
        from .engines.deepspeed_engine import consolidated_state
        return args, consolidated_state(path, args.n_layers)
    md = FileSystemReader(str(path)).read_metadata().state_dict_metadata
    state = {k: torch.empty(v.size, dtype=v.properties.dtype)
             for k, v in md.items() if k.startswith("model.") and hasattr(v, "size")}
    with warnings.catch_warnings():  # "assuming the intent is to load in a single process": yes
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.load(state, checkpoint_id=str(path), no_dist=True)
    return args, {k[len("model."):]: v for k, v in state.items()}
