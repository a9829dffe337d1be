"""The state of the torch engines (FSDP2, torch pipeline stages) through
torch.distributed.checkpoint (DCP): model and optimizer sharded as they are held (via
``get_state_dict``), the LR schedule, the trainer's client state (step, data position)
and each rank's RNG states.

Keys: ``model.*``, ``optim.*`` (by parameter name, so a checkpoint loads on another
pipeline layout), ``train`` (the client state and ``scheduler``), ``rng.rank<N>``.
"""

from __future__ import annotations

import ast
import logging
import random
import re
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed._state_dict_utils import CompanionMismatch, _copy_state_dict, _create_cpu_state_dict
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions, get_model_state_dict, get_optimizer_state_dict, set_model_state_dict,
    set_optimizer_state_dict)
from torch.distributed.checkpoint.staging import BlockingAsyncStager
from torch.distributed.checkpoint.stateful import Stateful
from torch.distributed.tensor import DTensor

log = logging.getLogger("slurmtrain.train")


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
    torch.set_rng_state(state["torch"])
    random.setstate(ast.literal_eval(state["python"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def _size(state_dict: dict[str, Any]) -> str:
    tensors: list[torch.Tensor] = []
    _iterate(state_dict, tensors.append)
    size = sum(t.numel() * t.element_size() for t in tensors)
    return f"{size / 2**30:.1f} GiB" if size >= 2**30 else f"{size / 2**20:.0f} MiB"


def _iterate(obj: Any, visit) -> None:
    if isinstance(obj, DTensor):
        visit(obj.to_local())
    elif isinstance(obj, torch.Tensor):
        visit(obj)
    elif isinstance(obj, dict):
        for v in obj.values():
            _iterate(v, visit)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _iterate(v, visit)


def _on_gpu(model: torch.nn.Module) -> bool:
    return any(p.device.type == "cuda" for p in model.parameters())


class ReusedStaging(BlockingAsyncStager):
    """A background save's copy of the state into the same host buffers at every save,
    pinned when the state is on a GPU. What the loop waits for is this copy: into fresh
    pageable memory it ran at about 2 GiB/s off an H200 (BENCHMARKS.md), into pinned
    memory it runs at the link's speed, and on the CPU the fresh pages cost their first
    touch. The buffers are overwritten by the next save only: the Checkpointer waits for
    the save in flight before it begins another. They are made again if the state's
    layout changed (keys, or a tensor's shape), and in pageable memory where none can be
    pinned (said once)."""

    def __init__(self, pin: bool):
        super().__init__(cache_staged_state_dict=True, type_check=False)
        self.pin = pin

    def stage(self, state_dict: dict[str, Any]) -> dict[str, Any]:
        if self.state_dict_cache is not None:
            try:
                return _copy_state_dict(state_dict, self.state_dict_cache, type_check=False)
            except (CompanionMismatch, RuntimeError):  # another layout, or a tensor of another shape
                self.state_dict_cache = None
        self.state_dict_cache = self._buffers(state_dict)
        return _copy_state_dict(state_dict, self.state_dict_cache, type_check=False)

    def _buffers(self, state_dict: dict[str, Any]) -> dict[str, Any]:
        if self.pin:
            try:
                return _create_cpu_state_dict(state_dict, pin_memory=True)
            except RuntimeError as err:  # page-locked memory is a node's scarcer kind
                log.warning("could not pin %s of host memory for the checkpoints' copies (%s): using pageable "
                            "memory, slower to copy into", _size(state_dict), str(err).splitlines()[0])
                self.pin = False
        return _create_cpu_state_dict(state_dict, pin_memory=False)


class DcpState:
    """Save and load of an engine's model, optimizer and schedule, with the client state."""

    def __init__(self, model: torch.nn.Module, optim: torch.optim.Optimizer, scheduler: Any,
                 *, async_save: bool):
        self.model, self.optim, self.scheduler = model, optim, scheduler
        self.rank = dist.get_rank()
        # Async saves run on a gloo group of their own, beside the training's collectives.
        self._async_pg = dist.new_group(backend="gloo") if async_save else None
        self._stager = ReusedStaging(pin=_on_gpu(model)) if async_save else None
        self._taking = ReusedStaging(pin=_on_gpu(model))  # the copies in node memory: buffers of their own

    def _state(self, client: dict[str, Any]) -> dict[str, Any]:
        return {"model": _ModelState(self.model), "optim": _OptimState(self.model, self.optim),
                "train": {**client, "scheduler": self.scheduler.state_dict()},
                "rng": {f"rank{self.rank}": _rng_state()}}

    def save(self, path: Path, client: dict[str, Any]):
        """Write this rank's shards; returns the future of an async save, else None."""
        if self._async_pg is not None:
            return dcp.async_save(self._state(client), checkpoint_id=str(path),
                                  process_group=self._async_pg, async_stager=self._stager)
        dcp.save(self._state(client), checkpoint_id=str(path))
        return None

    def local_state(self, client: dict[str, Any]) -> dict[str, Any]:
        """This rank's part of everything, on the CPU: for a copy in node memory. The copy is
        taken into the same host buffers each time (pinned on a GPU), which the memory tier
        writes out before it takes the next one (``MemoryTier.keep`` finishes the last first)."""
        state = self._state(client)
        return self._taking.stage({"model": _views(state["model"].state_dict()),
                                   "optim": _views(state["optim"].state_dict()),
                                   "train": state["train"], "rng": state["rng"]})

    def load_local(self, saved: dict[str, Any], client: dict[str, Any]) -> dict[str, Any]:
        """Restore what :meth:`local_state` took (same layout); returns the client state."""
        state = self._state(client)
        for key in ("model", "optim"):
            state[key].load_state_dict(_fill(state[key].state_dict(), saved[key]))
        train = dict(saved["train"])
        self.scheduler.load_state_dict(train.pop("scheduler"))
        _set_rng_state(saved["rng"][f"rank{self.rank}"])
        return train

    def load(self, path: Path, client: dict[str, Any]) -> dict[str, Any]:
        """Restore everything from ``path``; returns the client state given to :meth:`save`
        (``client`` is its template: DCP reads the keys it is given)."""
        state = self._state(client)
        available = FileSystemReader(str(path)).read_metadata().state_dict_metadata
        if not any(k.startswith(f"rng.rank{self.rank}.") for k in available):
            # Saved with fewer ranks: this rank keeps its fresh RNG state.
            log.warning("checkpoint %s has no RNG state for rank %d", path, self.rank)
            del state["rng"]
        if any(re.match(r"optim\.param_groups\.\d+\.", k) for k in available):
            state["optim"] = _OptimState(self.model, self.optim, flatten=False)  # older format
        dcp.load(state, checkpoint_id=str(path))
        self.scheduler.load_state_dict(state["train"].pop("scheduler"))
        if "rng" in state:
            _set_rng_state(state["rng"][f"rank{self.rank}"])
        return state["train"]


def _views(obj: Any) -> Any:
    """``obj`` with each DTensor's local shard in its place (no copy: ``local_state`` copies)."""
    if isinstance(obj, DTensor):
        return obj.to_local().detach()
    if isinstance(obj, torch.Tensor):
        return obj.detach()
    if isinstance(obj, dict):
        return {k: _views(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_views(v) for v in obj)
    return obj


def _fill(template: Any, saved: Any) -> Any:
    """``template`` (a state dict as the model or optimizer gives it) with ``saved``'s values
    copied into its tensors, a DTensor's into its local shard."""
    if isinstance(template, DTensor):
        template.to_local().copy_(saved)
        return template
    if isinstance(template, torch.Tensor):
        template.copy_(saved)
        return template
    if isinstance(template, dict):
        missing = template.keys() - saved.keys()
        if missing:
            raise ValueError(f"node-memory copy lacks {sorted(missing)[:3]}")
        return {k: _fill(v, saved[k]) for k, v in template.items()}
    if isinstance(template, (list, tuple)):
        return type(template)(_fill(t, s) for t, s in zip(template, saved))
    return saved


def consolidated(path: Path) -> dict[str, torch.Tensor]:
    """The full model state of a DCP checkpoint folder, read into this one process (no
    process group): ``slurmtrain export``."""
    md = FileSystemReader(str(path)).read_metadata().state_dict_metadata
    state = {k: torch.empty(v.size, dtype=v.properties.dtype)
             for k, v in md.items() if k.startswith("model.") and hasattr(v, "size")}
    with warnings.catch_warnings():  # "assuming the intent is to load in a single process": yes
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.load(state, checkpoint_id=str(path), no_dist=True)
    return {k[len("model."):]: v for k, v in state.items()}
