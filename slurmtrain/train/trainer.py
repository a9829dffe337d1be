"""Builds a run from a recipe and trains it: the step loop, evaluation, logging, stopping.

``build(recipe, ...)`` checks what the user gave (batch sizes, data, tokenizer) before
any expensive work, then composes model, parallelism, data, optimizer and checkpointer;
``Trainer.train()`` runs until the last step (exit 0) or a stop request (checkpoint,
exit 75); a stop request agreed after the last step finishes (exit 0).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from .. import events, heartbeat
from ..errors import ConfigError
from . import data as data_mod
from . import speed
from .checkpoint import Checkpointer
from .distributed import World
from .inputs import check_pipeline, corpus_files
from .metrics import MetricsLog, Throughput, peak_flops, peak_mem_gib
from .probe import ComputeProbe
from . import cadence as cadence_mod
from .model import count_parameters, meta_model
from .parallelize import parallelize
from .presets import flops_per_token, human_count
from ..schema import Sources
from .recipe import Recipe, model_args, recipe_to_dict, resolve_data_path
from .stop import STOP_EXIT_CODE, StopRequest
from .tracking import open_trackers
from .tokenizer import Tokenizer, load_tokenizer

log = logging.getLogger("slurmtrain.train")


class WarmupCosine:
    """LR multiplier: linear warm-up to 1, then cosine decay to ``min_ratio`` at ``steps``.
    A class rather than a closure so that LambdaLR's state dict (and the checkpoint) holds it."""

    def __init__(self, warmup: int, steps: int, min_ratio: float):
        self.warmup, self.steps, self.min_ratio = warmup, steps, min_ratio

    def __call__(self, done: int) -> float:  # done = optimizer steps already taken
        if done < self.warmup:
            return (done + 1) / self.warmup
        progress = min(1.0, (done - self.warmup) / max(1, self.steps - self.warmup))
        return self.min_ratio + (1 - self.min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def compute_dtype(name: str, device: torch.device) -> torch.dtype | None:
    """The FSDP2 ``param_dtype``: None means plain fp32."""
    if name == "bfloat16" or (name == "auto" and device.type == "cuda"):
        return torch.bfloat16
    return None


@dataclass
class Trainer:
    recipe: Recipe
    world: World
    run_dir: Path
    model: torch.nn.Module
    optim: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    stream: data_mod.TrainStream
    val: Any  # numpy array of held-out sequences
    ckpt: Checkpointer
    accum: int
    flops_per_token: int
    autocast_dtype: torch.dtype | None = None
    step: int = 0
    pipeline: Any = None  # a pipeline.Pipeline when the recipe has pipeline.stages > 1
    engine: Any = None  # an engines.Engine (train.engine = "deepspeed"): it takes the step
    bubble: float = 0.0   # measured idle share of this rank's last pipeline step

    @property
    def _rank0(self) -> bool:
        return self.world.rank == 0

    def _micro_loss(self, tokens: torch.Tensor) -> torch.Tensor:
        tokens = data_mod.to_device(tokens, self.world.device)  # pinned on a GPU: no host wait
        with self._autocast():
            logits = self.model(tokens[:, :-1])
        return F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten())

    def _autocast(self):
        # Sharded models get bf16 from FSDP2's MixedPrecisionPolicy; an unsharded one
        # (a single rank) from autocast.
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.world.device.type, dtype=self.autocast_dtype)

    def _train_step(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.engine is not None:
            return self.engine.train_step(self.stream.next_step(self.accum))
        if self.pipeline is not None:
            return self._pipeline_step()
        total = torch.zeros((), device=self.world.device)
        for tokens in self.stream.next_step(self.accum):
            loss = self._micro_loss(tokens)
            (loss / self.accum).backward()
            total += loss.detach()
        clip = self.recipe.train.grad_clip or float("inf")
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip)
        if hasattr(grad_norm, "full_tensor"):
            grad_norm = grad_norm.full_tensor()
        self.optim.step()
        self.scheduler.step()
        self.optim.zero_grad(set_to_none=True)
        return total / self.accum, grad_norm

    def _pipeline_step(self) -> tuple[torch.Tensor, torch.Tensor]:
        # This data-parallel rank's whole share of the step; the schedule cuts it into
        # pipeline.microbatches micro-batches and scales the gradients by their number.
        tokens = torch.cat(self.stream.next_step(self.accum))
        loss, self.bubble = self.pipeline.train_step(tokens, self.world.device)
        grad_norm = self.pipeline.clip_grads(self.recipe.train.grad_clip or float("inf"))
        self.optim.step()
        self.scheduler.step()
        self.optim.zero_grad(set_to_none=True)
        return loss, grad_norm

    def _mean_over_ranks(self, value: torch.Tensor) -> float:
        # Gloo has no AVG: sum, then divide. A sync point, so only on log steps.
        # Under a pipeline every stage holds its data-parallel rank's value: the sum over
        # the world counts each one once per stage, and the world size divides that out.
        value = value.detach().clone().reshape(1)
        dist.all_reduce(value)
        return value.item() / self.world.size

    @torch.no_grad()
    def evaluate(self) -> float | None:
        cfg = self.recipe.train
        if hasattr(self.engine, "eval_loss"):  # DeepSpeed's pipeline: its own schedule
            batches = data_mod.val_batches(self.val, self.stream.rank, self.stream.world,
                                           cfg.micro_batch_size, cfg.eval_batches)
            return self._mean_over_ranks(self.engine.eval_loss(batches)) if batches else None
        rank, size = ((self.pipeline.dp_rank, self.pipeline.dp) if self.pipeline
                      else (self.world.rank, self.world.size))
        batches = data_mod.val_batches(self.val, rank, size, cfg.micro_batch_size,
                                       cfg.eval_batches)
        if not batches:
            return None
        if self.pipeline is not None:
            tokens = torch.cat(batches)  # padded to the micro-batch count if need be
            return self._mean_over_ranks(self.pipeline.eval_loss(tokens, self.world.device))
        self.model.eval()
        total = torch.zeros((), device=self.world.device)
        for tokens in batches:
            total += self._micro_loss(tokens)
        self.model.train()
        return self._mean_over_ranks(total / len(batches))

    def train(self) -> int:
        """Train to the last step; returns the process exit status (0, or 75 when stopped)."""
        cfg, debug = self.recipe.train, self.recipe.debug
        stop = StopRequest()
        # Opened before the first record: it reads which steps earlier starts logged.
        metrics = MetricsLog(self.run_dir, self._rank0,
                             open_trackers(self.run_dir, recipe_to_dict(self.recipe), self._rank0))
        peak = peak_flops(self.world.device)
        seq_len = self.recipe.data.max_seq_len
        meter = Throughput()
        probe = ComputeProbe(self.world.device)
        cadence = self._cadence()
        self.model.train()
        while self.step < cfg.steps:
            step = self.step + 1
            if debug.fail_at_step == step:
                raise RuntimeError(f"debug.fail_at_step = {step}: failing on purpose")
            lr = self.scheduler.get_last_lr()[0]
            loss, grad_norm = self._train_step()
            self.step = step
            probe.maybe(step)
            heartbeat.beat(step, probe.mean_ms)  # progress and speed, for the supervisor's hang and straggler checks
            meter.add(tokens=cfg.global_batch_size * seq_len, samples=cfg.global_batch_size)
            if step % cfg.log_steps == 0 or step == cfg.steps:
                self._log(metrics, meter, peak, step, loss, grad_norm, lr)
            if cfg.eval_steps and step % cfg.eval_steps == 0:
                self._eval(metrics, step)
                meter.reset()
            if stop.agreed() or debug.stop_at_step == step:
                reason = stop.reason or f"debug.stop_at_step = {step}"
                if step == cfg.steps:
                    # Nothing is left to train: finish (exit 0) rather than stop (exit 75),
                    # which would cost a requeue that only finds the run done.
                    log.info("stop requested (%s) after the last step: finishing", reason)
                    break
                log.info("stop requested (%s): saving a checkpoint at step %d", reason, step)
                if self.ckpt.last_saved != step:
                    self.ckpt.save(step)
                self.ckpt.wait()
                if self._rank0:
                    events.append(self.run_dir, "stopped", step=step)
                # torchrun ends the other ranks as soon as one exits non-zero: nobody
                # leaves before rank 0 has written the marker and the event.
                dist.barrier()
                return STOP_EXIT_CODE
            if cadence is not None:
                cadence.tick(time.perf_counter())
                if cadence.due(step, self.ckpt.last_saved) and step < cfg.steps:
                    self._save_on_cadence(cadence, step)
                    meter.reset()
            elif cfg.save_steps and step % cfg.save_steps == 0 and step < cfg.steps:
                self.ckpt.save(step)
                meter.reset()
        if self.ckpt.last_saved != self.step:
            self.ckpt.save(self.step)
        self.ckpt.wait()
        if self._rank0:
            events.append(self.run_dir, "finished", step=self.step)
            log.info("finished at step %d", self.step)
        return 0

    def _cadence(self) -> cadence_mod.Cadence | None:
        """resilience.checkpoint_every = "auto" (the job script says so): the Young-Daly cadence."""
        mtbf = cadence_mod.auto()
        if mtbf is None:
            return None
        nodes = int(os.environ.get("SLURMTRAIN_NNODES") or 1)
        return cadence_mod.Cadence(mtbf, nodes, self.run_dir, first=self.recipe.train.save_steps)

    def _save_on_cadence(self, cadence: cadence_mod.Cadence, step: int) -> None:
        """Save, time what it stalled, and choose the next interval: every rank the same (the
        largest of the ranks' choices), rank 0 says it when it changes."""
        start = time.perf_counter()
        self.ckpt.save(step)
        cost = time.perf_counter() - start
        cadence.tick(time.perf_counter(), saved=True)
        chosen = cadence.after_save(cost)
        steps = torch.tensor(float(chosen.steps if chosen else cadence.every), device=self.world.device)
        dist.all_reduce(steps, op=dist.ReduceOp.MAX)
        if int(steps.item()) != cadence.every:
            cadence.every = int(steps.item())
            if self._rank0 and chosen is not None:
                events.append(self.run_dir, "checkpoint_interval", **{**chosen.to_event(), "steps": cadence.every})
                log.info("checkpoints: %s", cadence_mod.describe({**chosen.to_event(), "steps": cadence.every}))

    def _log(self, metrics: MetricsLog, meter: Throughput, peak: float | None, step: int,
             loss: torch.Tensor, grad_norm: torch.Tensor, lr: float) -> None:
        loss_v = self._mean_over_ranks(loss)
        tok_s, samples_s, step_time = meter.rates()
        mfu = (self.flops_per_token * tok_s / (peak * self.world.size)) if peak else None
        record = {"step": step, "total_steps": self.recipe.train.steps, "loss": loss_v, "lr": lr, "grad_norm": grad_norm.item(),
                  "tokens_per_s": round(tok_s, 1), "samples_per_s": round(samples_s, 3),
                  "step_time": round(step_time, 5), "mfu": mfu,
                  "peak_mem": round(peak_mem_gib(self.world.device), 3),
                  "epoch": round(self.stream.epoch, 4)}
        if self.pipeline is not None:
            # Measured: the idle share of the step's schedule on each rank (the step in
            # the log), averaged over ranks; and the schedule's own figure.
            record["bubble"] = round(self._mean_over_ranks(torch.tensor(self.bubble)), 4)
            record["bubble_theoretical"] = round(self.pipeline.bubble, 4)
        metrics.write(record)
        log.info("step %d/%d | loss %.4f | %s tok/s | lr %.3g", step, self.recipe.train.steps,
                 loss_v, f"{tok_s:,.0f}", lr)
        meter.reset()

    def _eval(self, metrics: MetricsLog, step: int) -> None:
        eval_loss = self.evaluate()
        if eval_loss is None:
            log.warning("evaluation skipped: the held-out slice has fewer than "
                        "micro_batch_size x data-parallel ranks sequences")
            return
        metrics.write({"step": step, "eval_loss": eval_loss})
        log.info("step %d | eval loss %.4f", step, eval_loss)


def preflight(recipe: Recipe, sources: Sources, world_size: int) -> tuple[int, Tokenizer]:
    """The checks that need no process group (so they run before one exists, and a refused
    start tears nothing down): batch sizes, tokenizer, data path. Returns the gradient
    accumulation steps and the tokenizer."""
    _, accum, _ = check_pipeline(recipe, sources, world_size)
    tok = load_tokenizer(recipe.data.tokenizer)
    vocab = model_args(recipe).vocab_size
    if tok.vocab_size > vocab:
        raise ConfigError(sources.of("model.vocab_size"), "model.vocab_size",
                          f"{vocab} is smaller than the tokenizer's {tok.vocab_size} "
                          f"({tok.name}); set model.vocab_size")
    corpus_files(resolve_data_path(recipe.data.path), sources.of("data.path"), recipe.data.path)
    return accum, tok


def build(recipe: Recipe, sources: Sources, world: World, run_dir: Path,
          init_ckpt: str | None) -> Trainer:
    """Check the inputs, then compose the run. ``sources`` says where each recipe value
    came from (file, ``--set``, ``--data-path``), for messages."""
    cfg = recipe.train
    accum, tok = preflight(recipe, sources, world.size)
    _, _, microbatches = check_pipeline(recipe, sources, world.size)
    args = model_args(recipe)

    model = meta_model(args)
    n_params = count_parameters(model)
    log.info("model: preset %s, %s parameters (%d), %d layers, dim %d; world size %d on %s",
             recipe.model.preset, human_count(n_params), n_params, args.n_layers, args.dim,
             world.size, world.device.type)

    corpus = data_mod.load_corpus(resolve_data_path(recipe.data.path), tok, recipe.data.max_seq_len,
                                  recipe.data.val_fraction, recipe.data.seed,
                                  sources.of("data.path"))
    log.info("data: %s, %d documents, %s tokens (%s): %d training and %d held-out sequences of %d",
             recipe.data.path, corpus.n_docs, f"{corpus.n_tokens:,}", tok.name, len(corpus.train),
             len(corpus.val), recipe.data.max_seq_len)
    if cfg.engine == "deepspeed":  # its own model wrapping, optimizer step and checkpoints
        from .engines.deepspeed_engine import build_engine
        return build_engine(
            recipe, sources, world, run_dir, init_ckpt, args=args, accum=accum,
            stream=data_mod.TrainStream(corpus.train, recipe.data.seed, world.rank, world.size,
                                        cfg.micro_batch_size),
            val=corpus.val, flops=flops_per_token(args, recipe.data.max_seq_len),
            meta={"recipe": recipe_to_dict(recipe), "recipe_source": sources.default,
                  "model_args": asdict(args), "tokenizer": tok.name,
                  "world_size": world.size, "pipeline_stages": recipe.pipeline.stages})
    dtype = compute_dtype(cfg.dtype, world.device)
    pipe = None
    if recipe.pipeline.stages > 1:
        from .pipeline import build_pipeline
        pipe = build_pipeline(model, recipe.pipeline, world, microbatches, seed=cfg.seed,
                              param_dtype=dtype,
                              activation_checkpointing=cfg.activation_checkpointing,
                              compile=cfg.compile)
        model, sharded = pipe.local, True  # this rank's modules, under the model's names
        dp_rank, dp = pipe.dp_rank, pipe.dp
    else:
        dp_rank, dp = world.rank, world.size
        sharded = parallelize(model, world.mesh, param_dtype=dtype,
                              activation_checkpointing=cfg.activation_checkpointing,
                              compile=cfg.compile)
        model.to_empty(device=world.device)
        with warnings.catch_warnings():
            # Sharded init is reproducible at a given world size (the resume test compares
            # runs bitwise), but on CPU meshes it does not draw what unsharded init draws:
            # runs at different world sizes start from different weights (checked with 2
            # ranks under torch 2.13; DTensor's offset RNG that would align them is for
            # CUDA, unverified here). --init-ckpt gives every layout the same start.
            warnings.filterwarnings("ignore", message="DTensor random operators")
            model.init_weights(seed=cfg.seed)
    # The data position is global: a data-parallel rank reads the same sequences whatever
    # the pipeline depth, and a resume on another layout continues the same sequence.
    stream = data_mod.TrainStream(corpus.train, recipe.data.seed, dp_rank, dp,
                                  cfg.micro_batch_size)

    optim = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(cfg.beta1, cfg.beta2),
                              weight_decay=cfg.weight_decay,
                              fused=speed.fused_adamw(world.device)[0])
    log.info("speed: %s", speed.describe(speed.options(recipe, optim, world.device, accum)))
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optim, WarmupCosine(cfg.warmup_steps, cfg.steps, cfg.min_lr / cfg.lr))
    meta = {"recipe": recipe_to_dict(recipe), "recipe_source": sources.default,
            "model_args": asdict(args), "tokenizer": tok.name, "world_size": world.size,
            "pipeline_stages": recipe.pipeline.stages}
    ckpt = Checkpointer(run_dir, model, optim, scheduler, stream, meta, keep_last=cfg.keep_last,
                        async_save=cfg.async_save, kill_at_step=recipe.debug.kill_in_save_at_step)
    step = ckpt.resume()
    if step == 0 and init_ckpt:
        load_initial_weights(model, args, init_ckpt, world.rank, f"preset {recipe.model.preset}",
                             whole_model=pipe is None)
    return Trainer(recipe=recipe, world=world, run_dir=run_dir, model=model, optim=optim,
                   scheduler=scheduler, stream=stream, val=corpus.val, ckpt=ckpt, accum=accum,
                   flops_per_token=flops_per_token(args, recipe.data.max_seq_len),
                   autocast_dtype=None if sharded else dtype, step=step, pipeline=pipe)


def load_initial_weights(model: torch.nn.Module, args: Any, ckpt_dir: str, rank: int,
                         model_name: str, whole_model: bool = True) -> None:
    """Start from a Hugging Face checkpoint. Only rank 0 reads it (a 70B model is 140 GB) and
    FSDP2 scatters the shards; a checkpoint that does not fit the model is refused on rank 0
    and the refusal is sent to every rank, so all of them stop with the same ConfigError."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
    from .hf import read_hf_state_dict
    state, problem = {}, [None]
    if rank == 0:
        try:
            state = read_hf_state_dict(ckpt_dir, args, model_name=model_name)
        except ConfigError as err:
            problem = [(err.source, err.key, err.message)]
    dist.broadcast_object_list(problem, src=0)
    if problem[0] is not None:
        raise ConfigError(*problem[0])
    # A pipeline rank holds some of the parameters: it keeps those (rank 0's state has all
    # of them; read_hf_state_dict has checked it covers the whole model).
    set_model_state_dict(model, state, options=StateDictOptions(
        full_state_dict=True, broadcast_from_rank0=True, strict=whole_model))
    log.info("initial weights from %s", ckpt_dir)
