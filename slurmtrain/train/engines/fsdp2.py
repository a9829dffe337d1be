"""The FSDP2 engine: every rank holds a shard of every block (``parallelize.py``); on one
rank the model is not sharded and bf16 comes from autocast. Its checkpoints are DCP's
(``engines/dcp.py``), as are those of the torch pipeline, which builds on this module."""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from .. import optim as optim_mod
from .. import speed
from ..data import to_device
from ..model import meta_model
from ..parallelize import parallelize
from . import dcp
from .base import Context

log = logging.getLogger("slurmtrain.train")


class TorchEngine:
    """What the torch engines share: the optimizer and schedule, DCP state, the lr."""

    name = "torch"

    def __init__(self, ctx: Context, model: torch.nn.Module, dp_rank: int, dp: int):
        cfg = ctx.recipe.train
        self.model, self.dp_rank, self.dp = model, dp_rank, dp
        self.device = ctx.world.device
        self.grad_clip = cfg.grad_clip or float("inf")
        self.optim = optim_mod.adamw(model.parameters(), cfg,
                                     fused=speed.fused_adamw(self.device)[0])
        self.scheduler = optim_mod.schedule(self.optim, cfg)
        self.state = dcp.DcpState(model, self.optim, self.scheduler, async_save=cfg.async_save)
        self.meta = {"engine": self.name}  # for train_meta.json
        log.info("speed: %s", speed.describe(speed.options(ctx.recipe, self.optim, self.device,
                                                           ctx.accum)))

    def lr(self) -> float:
        return self.scheduler.get_last_lr()[0]

    def _step_optimizer(self) -> None:
        self.optim.step()
        self.scheduler.step()
        self.optim.zero_grad(set_to_none=True)

    def log_fields(self, mean_over_ranks: Any) -> dict[str, Any]:
        return {}

    def save(self, path: Path, client: dict[str, Any]):
        return self.state.save(path, client)

    def load(self, path: Path, client: dict[str, Any]) -> dict[str, Any]:
        return self.state.load(path, client)


class FSDP2Engine(TorchEngine):
    name = "fsdp2"

    def __init__(self, ctx: Context, model: torch.nn.Module, autocast: torch.dtype | None):
        super().__init__(ctx, model, ctx.world.rank, ctx.world.size)
        self.autocast_dtype = autocast

    def _autocast(self):
        # Sharded models get bf16 from FSDP2's MixedPrecisionPolicy; an unsharded one
        # (a single rank) from autocast.
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast_dtype)

    def _micro_loss(self, tokens: torch.Tensor) -> torch.Tensor:
        tokens = to_device(tokens, self.device)  # pinned on a GPU: no host wait
        with self._autocast():
            logits = self.model(tokens[:, :-1])
        return F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten())

    def train_step(self, micro_batches: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        total = torch.zeros((), device=self.device)
        for tokens in micro_batches:
            loss = self._micro_loss(tokens)
            (loss / len(micro_batches)).backward()
            total += loss.detach()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
        if hasattr(grad_norm, "full_tensor"):
            grad_norm = grad_norm.full_tensor()
        self._step_optimizer()
        return total / len(micro_batches), grad_norm

    @torch.no_grad()
    def eval_loss(self, batches: list[torch.Tensor]) -> torch.Tensor:
        self.model.eval()
        total = torch.zeros((), device=self.device)
        for tokens in batches:
            total += self._micro_loss(tokens)
        self.model.train()
        return total / len(batches)


def build(ctx: Context) -> FSDP2Engine:
    cfg, world = ctx.recipe.train, ctx.world
    dtype = optim_mod.compute_dtype(cfg.dtype, world.device)
    model = meta_model(ctx.args)
    sharded = parallelize(model, world.mesh, param_dtype=dtype,
                          activation_checkpointing=cfg.activation_checkpointing,
                          compile=cfg.compile)
    model.to_empty(device=world.device)
    if ctx.resuming:
        model.rope.init_weights()  # not in the state dict: computed, never loaded
    else:
        model.init_weights(seed=cfg.seed)  # each shard its slice of the same numbers
    if ctx.init_ckpt:
        load_initial_weights(model, ctx, whole_model=True)
    return FSDP2Engine(ctx, model, autocast=None if sharded else dtype)


def load_initial_weights(model: torch.nn.Module, ctx: Context, whole_model: bool) -> None:
    """Start from a Hugging Face checkpoint. Only rank 0 reads it (a 70B model is 140 GB) and
    FSDP2 scatters the shards; a checkpoint that does not fit the model is refused on rank 0
    and the refusal is sent to every rank, so all of them stop with the same ConfigError."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    from ...errors import ConfigError
    from ..hf import read_hf_state_dict
    state, problem = {}, [None]
    if ctx.world.rank == 0:
        try:
            state = read_hf_state_dict(ctx.init_ckpt, ctx.args,
                                       model_name=f"preset {ctx.recipe.model.preset}")
        except ConfigError as err:
            problem = [(err.source, err.key, err.message)]
    dist.broadcast_object_list(problem, src=0)
    if problem[0] is not None:
        raise ConfigError(*problem[0])
    # A pipeline rank holds some of the parameters: it keeps those (rank 0's state has all
    # of them; read_hf_state_dict has checked it covers the whole model).
    set_model_state_dict(model, state, options=StateDictOptions(
        full_state_dict=True, broadcast_from_rank0=True, strict=whole_model))
    log.info("initial weights from %s", ctx.init_ckpt)


def consolidated(path: Path, args: Any) -> dict[str, torch.Tensor]:
    return dcp.consolidated(path)
