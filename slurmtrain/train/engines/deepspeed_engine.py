"""The DeepSpeed engine: ZeRO stages 0-3 through ``deepspeed.initialize`` on the same
``Transformer`` the FSDP2 path trains, initialised from the same seed.

The optimizer is the trainer's own torch AdamW and the schedule its warm-up + cosine
``LambdaLR``, handed to DeepSpeed as the client optimizer and scheduler: both engines do
the same arithmetic, and no DeepSpeed C++ optimizer (cpu_adam) is JIT-built. DeepSpeed
steps the scheduler itself at each accumulation boundary.

Checkpoints go through ``engine.save_checkpoint`` into ``checkpoints/step_<N>/`` (tag
``step_<N>``), under the same contract as the FSDP2 path: ``train_meta.json`` first,
every rank's shards, a barrier, then rank 0 writes the ``COMPLETE`` marker.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from ...errors import ConfigError
from ..checkpoint import Checkpointer, newest_complete
from . import ds_config

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


class DeepSpeedCheckpoints:
    """Save and load of the engine protocol through DeepSpeed's own checkpoint calls, one
    tag (folder) per step; shared by the ZeRO and the pipeline engine."""

    def __init__(self, engine: Any, device: torch.device):
        self.engine, self.device = engine, device

    def save(self, path: Path, client_state: dict[str, Any]) -> None:
        self.engine.save_checkpoint(str(path.parent), tag=path.name, client_state=client_state,
                                    save_latest=False)

    def load(self, path: Path) -> dict[str, Any]:
        loaded, client = self.engine.load_checkpoint(str(path.parent), tag=path.name)
        if loaded is None:
            raise RuntimeError(f"DeepSpeed could not load the checkpoint {path}")
        return client


class DeepSpeedEngine(DeepSpeedCheckpoints):
    """The engine protocol (``engines.Engine``) over a DeepSpeed engine."""

    def train_step(self, micro_batches: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        total = torch.zeros((), device=self.device)
        for tokens in micro_batches:
            tokens = tokens.to(self.device)
            logits = self.engine(tokens[:, :-1])
            loss = F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten())
            self.engine.backward(loss)  # scaled by 1/accumulation inside
            self.engine.step()          # the optimizer steps at the last micro-batch only
            total += loss.detach()
        norm = self.engine.get_global_grad_norm()
        norm = torch.as_tensor(0.0 if norm is None else norm, dtype=torch.float32)
        return total / len(micro_batches), norm


class DeepSpeedCheckpointer(Checkpointer):
    """:class:`Checkpointer`'s folder contract (marker last, keep-last-K, resume from the
    newest complete one), with DeepSpeed writing and reading the shards."""

    def __init__(self, run_dir: Path, engine: DeepSpeedEngine, data: Any, meta: dict[str, Any],
                 *, keep_last: int, kill_at_step: int | None):
        super().__init__(run_dir, engine.engine, engine.engine.optimizer,
                         engine.engine.lr_scheduler, data, meta, keep_last=keep_last,
                         async_save=False, kill_at_step=kill_at_step)
        self.ds = engine

    def save(self, step: int) -> None:
        path = self._begin_save(step)
        start = time.perf_counter()
        self.ds.save(path, {"step": step, "data": self.data.state_dict()})
        self._pending = (step, None, start)
        self.wait()  # barrier, then rank 0 writes the marker and prunes
        self.last_saved = step

    def resume(self) -> int:
        path = self._choose()
        if path is None:
            return 0
        client = self.ds.load(path)
        self.data.load_state_dict(client["data"])
        step = int(client["step"])
        self.last_saved = step
        if self.rank == 0:
            from ... import events
            log.info("resumed from %s (step %d)", path, step)
            events.append(self.run_dir, "resumed", step=step)
        return step


def fsdp2_initial_state(args, world, seed: int) -> dict[str, torch.Tensor]:
    """The weights the FSDP2 engine starts from on this world, gathered whole. FSDP2 inits
    each shard under DTensor's random generator, which (torch 2.13, CPU) draws other
    numbers than the unsharded model's ``init_weights(seed)``: initialising through the
    very same code is what makes both engines start from identical weights."""
    import warnings
    from ..model import meta_model
    from ..parallelize import parallelize
    model = meta_model(args)
    parallelize(model, world.mesh, param_dtype=None, activation_checkpointing=False,
                compile=False)
    model.to_empty(device=world.device)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="DTensor random operators")
        model.init_weights(seed=seed)
    return {k: (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().clone()
            for k, v in model.state_dict().items()}


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


def build_engine(recipe, sources, world, run_dir: Path, init_ckpt: str | None, *, args,
                 accum: int, stream, val, meta: dict[str, Any], flops: int):
    """The Trainer of a ``train.engine = "deepspeed"`` recipe."""
    from ..model import Transformer
    from ..trainer import Trainer, WarmupCosine, compute_dtype
    cfg = recipe.train
    dscfg = ds_config.load(recipe, sources)
    stages = recipe.pipeline.stages
    if stages > 1 and recipe.pipeline.microbatches not in (0, accum):
        raise ConfigError(sources.of("pipeline.microbatches"), "pipeline.microbatches",
                          f"{recipe.pipeline.microbatches}: DeepSpeed's pipeline runs one "
                          f"micro-batch per accumulation step ({accum} here); leave it 0")
    dtype = compute_dtype(cfg.dtype, world.device)
    config = ds_config.resolve(dscfg, recipe, sources, accum, bf16=dtype is torch.bfloat16)
    deepspeed = _import_deepspeed(world.device)
    if stages > 1:
        from .deepspeed_pipe import build_pipe_module
        model = build_pipe_module(deepspeed, args, stages, cfg.seed)
        grid = model._grid  # DeepSpeed's layout: this rank's data-parallel place
        stream.rank, stream.world = grid.get_data_parallel_rank(), grid.get_data_parallel_world_size()
    else:
        model = Transformer(args)
        model.load_state_dict(fsdp2_initial_state(args, world, cfg.seed))
    if init_ckpt and stages > 1:
        raise ConfigError("--init-ckpt", "", "not supported yet with DeepSpeed's pipeline")
    if init_ckpt and newest_complete(run_dir, warn=False) is None:
        from ..hf import read_hf_state_dict
        model.load_state_dict(read_hf_state_dict(init_ckpt, args,
                                                 model_name=f"preset {recipe.model.preset}"),
                              strict=False)
        log.info("initial weights from %s", init_ckpt)
    model.to(world.device)
    optim = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(cfg.beta1, cfg.beta2),
                              weight_decay=cfg.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optim, WarmupCosine(cfg.warmup_steps, cfg.steps, cfg.min_lr / cfg.lr))
    engine, ds_optim, _, ds_sched = _initialize(deepspeed, model, optim, scheduler, config,
                                                dscfg.source)
    if stages > 1:
        from .deepspeed_pipe import DeepSpeedPipe
        wrapped = DeepSpeedPipe(engine, world.device)
    else:
        wrapped = DeepSpeedEngine(engine, world.device)
    meta = {**meta, "engine": "deepspeed", "zero_stage": dscfg.zero_stage(),
            "deepspeed_config": config}
    ckpt = DeepSpeedCheckpointer(run_dir, wrapped, stream, meta, keep_last=cfg.keep_last,
                                 kill_at_step=recipe.debug.kill_in_save_at_step)
    step = ckpt.resume()
    log.info("engine: DeepSpeed %s, ZeRO stage %d, config %s", deepspeed.__version__,
             dscfg.zero_stage(), dscfg.source)
    return Trainer(recipe=recipe, world=world, run_dir=run_dir, model=engine, optim=ds_optim,
                   scheduler=ds_sched or scheduler, stream=stream, val=val, ckpt=ckpt,
                   accum=accum, flops_per_token=flops, step=step, engine=wrapped)


def consolidated_state(path: Path, n_layers: int) -> dict[str, torch.Tensor]:
    """The full fp32 state dict of a DeepSpeed checkpoint folder (any ZeRO stage, or a
    pipeline's layer files), gathered in this one process (no process group)."""
    if any(path.glob("layer_*-model_states.pt")):
        from .deepspeed_pipe import consolidated_pipe_state
        return consolidated_pipe_state(path, n_layers)
    os.environ.setdefault("DS_ACCELERATOR", "cpu")  # export runs on a login node
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint
    state = get_fp32_state_dict_from_zero_checkpoint(str(path.parent), tag=path.name)
    return {k: v.float().cpu() for k, v in state.items()}
