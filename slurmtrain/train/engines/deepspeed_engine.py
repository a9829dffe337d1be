"""The DeepSpeed engine: ZeRO stages 0-3 through ``deepspeed.initialize`` on the same
``Transformer`` the FSDP2 path trains, initialised from the same seed.

The optimizer is the trainer's own torch AdamW and the schedule its warm-up + cosine
``LambdaLR``, handed to DeepSpeed as the client optimizer and scheduler: both engines do
the same arithmetic, and no DeepSpeed C++ optimizer (cpu_adam) is JIT-built. DeepSpeed
steps the scheduler itself at each accumulation boundary.

Checkpoints go through ``engine.save_checkpoint`` into ``checkpoints/step_<N>/`` (tag
``step_<N>``), under the trainer's folder contract (``checkpoint.Checkpointer``).
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from ...errors import ConfigError
from .. import optim as optim_mod
from ..model import Transformer
from ...recipes import ds_config
from .base import Context

log = logging.getLogger("slurmtrain.train")


def _import_deepspeed(device: torch.device):
    """DeepSpeed, with its CPU shared-memory all-reduce op turned off on CPU: that op is
    JIT-compiled on first use (minutes on a busy 2-core machine, under a file lock that a
    killed run leaves behind, hanging every later one); gloo's all-reduce does the same."""
    # Started without a launcher (one process): DeepSpeed reads these from the environment.
    os.environ.setdefault("LOCAL_RANK", "0")
    import deepspeed
    if device.type == "cpu":
        sys.modules["deepspeed.comm.torch"].build_shm_op = lambda: None
    deepspeed.init_distributed(dist_init_required=False)  # wraps the trainer's process group
    logging.getLogger("DeepSpeed").setLevel(logging.WARNING)
    return deepspeed


class DeepSpeedEngine:
    """The engine protocol over a DeepSpeed engine (ZeRO stages 0-3)."""

    name = "deepspeed"

    def __init__(self, engine: Any, scheduler: Any, device: torch.device, dp_rank: int, dp: int,
                 meta: dict[str, Any]):
        self.engine, self.model, self.scheduler = engine, engine, scheduler
        self.device, self.dp_rank, self.dp = device, dp_rank, dp
        self.meta = meta  # for train_meta.json

    def lr(self) -> float:
        return self.scheduler.get_last_lr()[0]

    def log_fields(self, mean_over_ranks: Any) -> dict[str, Any]:
        return {}

    def _micro_loss(self, tokens: torch.Tensor) -> torch.Tensor:
        tokens = tokens.to(self.device)
        logits = self.engine(tokens[:, :-1])
        return F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten())

    def _grad_norm(self) -> torch.Tensor:
        norm = self.engine.get_global_grad_norm()
        return torch.as_tensor(0.0 if norm is None else norm, dtype=torch.float32)

    def train_step(self, micro_batches: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        total = torch.zeros((), device=self.device)
        for tokens in micro_batches:
            loss = self._micro_loss(tokens)
            self.engine.backward(loss)  # scaled by 1/accumulation inside
            self.engine.step()          # the optimizer steps at the last micro-batch only
            total += loss.detach()
        return total / len(micro_batches), self._grad_norm()

    @torch.no_grad()
    def eval_loss(self, batches: list[torch.Tensor]) -> torch.Tensor:
        self.engine.eval()
        total = torch.zeros((), device=self.device)
        for tokens in batches:
            total += self._micro_loss(tokens)
        self.engine.train()
        return total / len(batches)

    def save(self, path: Path, client: dict[str, Any]) -> None:
        self.engine.save_checkpoint(str(path.parent), tag=path.name, client_state=client,
                                    save_latest=False)

    def load(self, path: Path, client: dict[str, Any]) -> dict[str, Any]:
        loaded, saved = self.engine.load_checkpoint(str(path.parent), tag=path.name)
        if loaded is None:
            raise RuntimeError(f"DeepSpeed could not load the checkpoint {path}")
        return saved


class DeepSpeedPipe(DeepSpeedEngine):
    """The engine protocol over a ``PipelineEngine``: ``train_batch`` pulls
    ``gradient_accumulation_steps`` micro-batches of (inputs, labels) on the first and
    last stage and returns the loss averaged over them and the data-parallel ranks."""

    @staticmethod
    def _pairs(micro_batches: list[torch.Tensor]):
        return iter([(t[:, :-1], t[:, 1:]) for t in micro_batches])

    def train_step(self, micro_batches: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        loss = self.engine.train_batch(self._pairs(micro_batches))
        return loss.detach().float(), self._grad_norm()

    def eval_loss(self, micro_batches: list[torch.Tensor]) -> torch.Tensor:
        return self.engine.eval_batch(self._pairs(micro_batches),
                                      num_micro_batches=len(micro_batches)).float()


def _initialize(deepspeed, model, optim, scheduler, config: dict, source: str):
    """``deepspeed.initialize``; DeepSpeed's refusal of a config value becomes one line
    naming the config file (DeepSpeed raises assorted types: pydantic, assert, ValueError).
    A TypeError or KeyError may also be a fault of the code rather than the config: the
    line names the type, and the traceback goes to the log at debug level."""
    try:
        return deepspeed.initialize(model=model, optimizer=optim, lr_scheduler=scheduler,
                                    config=config, dist_init_required=False)
    except (AssertionError, ValueError, TypeError, KeyError) as err:
        log.debug("deepspeed.initialize raised", exc_info=True)
        first = " ".join(str(err).split())[:400] or "(no message)"
        raise ConfigError(source, "", f"DeepSpeed refused the config ({type(err).__name__}): {first}") from None


def _model(ctx: Context, deepspeed: Any, stages: int) -> tuple[torch.nn.Module, int, int]:
    """The module to hand to DeepSpeed and this rank's data-parallel (rank, size)."""
    world, seed = ctx.world, ctx.recipe.train.seed
    if stages > 1:
        from .deepspeed_pipe import build_pipe_module
        if ctx.init_ckpt:
            raise ConfigError("--init-ckpt", "", "not supported yet with DeepSpeed's pipeline")
        model = build_pipe_module(deepspeed, ctx.args, stages, seed)
        grid = model._grid  # DeepSpeed's layout: this rank's data-parallel place
        return model, grid.get_data_parallel_rank(), grid.get_data_parallel_world_size()
    model = Transformer(ctx.args)
    model.init_weights(seed=seed)
    if ctx.init_ckpt:  # before DeepSpeed copies the weights into its optimizer's partitions
        from ..hf import read_hf_state_dict
        model.load_state_dict(read_hf_state_dict(ctx.init_ckpt, ctx.args,
                                                 model_name=f"preset {ctx.recipe.model.preset}"),
                              strict=False)
        log.info("initial weights from %s", ctx.init_ckpt)
    return model, world.rank, world.size


def build(ctx: Context) -> DeepSpeedEngine:
    """A ``train.engine = "deepspeed"`` recipe's engine: ZeRO, or DeepSpeed's pipeline."""
    recipe, world = ctx.recipe, ctx.world
    cfg, stages = recipe.train, recipe.pipeline.stages
    dscfg = ds_config.load(recipe, ctx.sources)
    if stages > 1 and recipe.pipeline.microbatches not in (0, ctx.accum):
        raise ConfigError(ctx.sources.of("pipeline.microbatches"), "pipeline.microbatches",
                          f"{recipe.pipeline.microbatches}: DeepSpeed's pipeline runs one "
                          f"micro-batch per accumulation step ({ctx.accum} here); leave it 0")
    bf16 = optim_mod.compute_dtype(cfg.dtype, world.device) is torch.bfloat16
    config = ds_config.resolve(dscfg, recipe, ctx.sources, ctx.accum, bf16=bf16)
    deepspeed = _import_deepspeed(world.device)
    model, dp_rank, dp = _model(ctx, deepspeed, stages)
    model.to(world.device)
    optim = optim_mod.adamw(model.parameters(), cfg)
    scheduler = optim_mod.schedule(optim, cfg)
    engine, _, _, ds_sched = _initialize(deepspeed, model, optim, scheduler, config, dscfg.source)
    log.info("engine: DeepSpeed %s, ZeRO stage %d, config %s", deepspeed.__version__,
             dscfg.zero_stage(), dscfg.source)
    meta = {"engine": "deepspeed", "zero_stage": dscfg.zero_stage(), "deepspeed_config": config}
    kind = DeepSpeedPipe if stages > 1 else DeepSpeedEngine
    return kind(engine, ds_sched or scheduler, world.device, dp_rank, dp, meta)


def consolidated(path: Path, args: Any) -> dict[str, torch.Tensor]:
    """The full fp32 state dict of a DeepSpeed checkpoint folder (any ZeRO stage, or a
    pipeline's layer files), gathered in this one process (no process group)."""
    if any(path.glob("layer_*-model_states.pt")):
        from .deepspeed_pipe import consolidated_pipe_state
        return consolidated_pipe_state(path, args.n_layers)
    os.environ.setdefault("DS_ACCELERATOR", "cpu")  # export runs on a login node
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint
    state = get_fp32_state_dict_from_zero_checkpoint(str(path.parent), tag=path.name)
    return {k: v.float().cpu() for k, v in state.items()}
