"""Builds a run from a recipe and trains it: the step loop, evaluation, logging, stopping.

``build(recipe, ...)`` checks what the user gave (batch sizes, data, tokenizer) before
any expensive work, then composes the engine (model, parallelism, optimizer:
``engines/``), data and checkpointer; ``Trainer.train()`` runs until the last step
(exit 0) or a stop request (checkpoint, exit 75: the stop contract of ``slurmtrain.stop``);
a stop request agreed after the last step finishes (exit 0).
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist

from .. import cadence as cadence_mod
from .. import events, heartbeat, stop
from ..data.tokenizer import Tokenizer, load_tokenizer
from ..errors import ConfigError
from ..recipes.inputs import check_pipeline, corpus_files
from ..recipes.presets import flops_per_token, human_count, param_count
from ..recipes.recipe import Recipe, model_args, recipe_to_dict, resolve_data_path
from ..schema import Sources
from . import data as data_mod
from . import engines
from .checkpoint import Checkpointer, newest_complete
from .memtier import MemoryTier
from .distributed import World
from .metrics import MetricsLog, Throughput, peak_flops, peak_mem_gib
from .probe import ComputeProbe
from .tracking import open_trackers
from ..eventlog import Ev

log = logging.getLogger("slurmtrain.train")


@dataclass
class Trainer:
    recipe: Recipe
    world: World
    run_dir: Path
    engine: engines.Engine
    stream: data_mod.TrainStream
    val: Any  # numpy array of held-out sequences
    ckpt: Checkpointer
    accum: int
    flops_per_token: int
    step: int = 0

    @property
    def _rank0(self) -> bool:
        return self.world.rank == 0

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
        batches = data_mod.val_batches(self.val, self.engine.dp_rank, self.engine.dp,
                                       cfg.micro_batch_size, cfg.eval_batches)
        return self._mean_over_ranks(self.engine.eval_loss(batches)) if batches else None

    def train(self) -> int:
        """Train to the last step; returns the process exit status (0, or 75 when stopped)."""
        cfg, debug = self.recipe.train, self.recipe.debug
        early = f"{stop.reason()} before training began" if stop.should_stop() else ""
        # Opened before the first record: it reads which steps earlier starts logged.
        metrics = MetricsLog(self.run_dir, self._rank0,
                             open_trackers(self.run_dir, recipe_to_dict(self.recipe), self._rank0))
        if debug.stop_at_step == 0 and self.step == 0:  # the initial weights, as step_0
            return self._stop(0, "debug.stop_at_step = 0")
        loop = _Loop(peak_flops(self.world.device), Throughput(), ComputeProbe(self.world.device),
                     self._cadence(cfg.save_steps), self._cadence(cfg.memory_steps) if cfg.memory_steps else None)
        self.engine.model.train()
        while self.step < cfg.steps:
            step = self.step + 1
            if debug.fail_at_step == step:
                raise RuntimeError(f"debug.fail_at_step = {step}: failing on purpose")
            self._one_step(step, metrics, loop)
            if stop.agree(stop.should_stop()) or debug.stop_at_step == step:
                reason = early or stop.reason() or f"debug.stop_at_step = {step}"
                if step == cfg.steps:
                    # Nothing is left to train: finish (exit 0) rather than stop (exit 75),
                    # which would cost a requeue that only finds the run done.
                    log.info("stop requested (%s) after the last step: finishing", reason)
                    break
                return self._stop(step, reason)
            self._maybe_save(step, loop)
        if self.ckpt.last_saved != self.step:
            self.ckpt.save(self.step)
        self.ckpt.wait()
        self.ckpt.clear_memory()
        if self._rank0:
            events.append(self.run_dir, Ev.FINISHED, step=self.step)
            log.info("finished at step %d", self.step)
        return 0

    def _one_step(self, step: int, metrics: MetricsLog, loop: "_Loop") -> None:
        """Train step ``step``, beat, log and evaluate when due."""
        cfg = self.recipe.train
        lr = self.engine.lr()
        began = time.perf_counter()
        loss, grad_norm = self._train_step()
        if self.recipe.debug.step_seconds:
            time.sleep(max(0.0, self.recipe.debug.step_seconds - (time.perf_counter() - began)))
        self.step = step
        loop.probe.maybe(step)
        # Progress and speed, for the supervisor's hang and straggler checks; paced: saves and
        # evaluations beat from a thread (heartbeat.busy), so a quiet loop is judged sooner.
        heartbeat.beat(step, loop.probe.mean_ms, paced=True)
        loop.meter.add(tokens=cfg.global_batch_size * self.recipe.data.max_seq_len,
                       samples=cfg.global_batch_size)
        if step % cfg.log_steps == 0 or step == cfg.steps:
            self._log(metrics, loop, step, loss, grad_norm, lr)
        if cfg.eval_steps and step % cfg.eval_steps == 0:
            evaluating = time.perf_counter()
            self._eval(metrics, step)
            loop.meter.skip(evaluating)

    def _train_step(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The engine's step over this rank's next micro-batches: (mean loss, grad norm)."""
        return self.engine.train_step(self.stream.next_step(self.accum))

    def _stop(self, step: int, reason: str) -> int:
        """Save ``step`` (if not saved yet), say so, and return the stop exit status."""
        log.info("stop requested (%s): saving a checkpoint at step %d", reason, step)
        if self.ckpt.last_saved != step:
            self.ckpt.save(step)
        self.ckpt.wait()
        self.ckpt.clear_memory()  # the next start loads the durable checkpoint just saved
        if self._rank0:
            events.append(self.run_dir, Ev.STOPPED, step=step)
        # torchrun ends the other ranks as soon as one exits non-zero: nobody
        # leaves before rank 0 has written the marker and the event.
        dist.barrier()
        return stop.STOP_EXIT_CODE

    def _maybe_save(self, step: int, loop: "_Loop") -> None:
        """A checkpoint when the cadence (or ``train.save_steps``) says so, and a copy in node
        memory when its own cadence (or ``train.memory_steps``) does; never at the last step
        (the end saves it)."""
        cfg, durable, memory = self.recipe.train, loop.cadence, loop.memory_cadence
        if step >= cfg.steps:
            return
        for c in (durable, memory):
            if c is not None:
                c.tick(time.perf_counter())
        saving, saved = time.perf_counter(), False
        if durable is not None and durable.due(step, self.ckpt.last_saved):
            self._save_on_cadence(durable, step, self.ckpt.save)
            saved = True
        elif durable is None and cfg.save_steps and step % cfg.save_steps == 0:
            self.ckpt.save(step)
            saved = True
        copies = cfg.memory_steps and self.ckpt.last_saved != step and self.ckpt.copies_in_memory()
        if copies and memory is not None and \
                memory.due(step, max(self.ckpt.last_saved, self.ckpt.last_kept)):  # either is a restart point
            self._save_on_cadence(memory, step, self.ckpt.keep_in_memory, tier="memory")
            saved = True
        elif copies and memory is None and step % cfg.memory_steps == 0:
            self.ckpt.keep_in_memory(step)
            saved = True
        if saved:
            loop.meter.skip(saving)
            for c in (durable, memory):
                if c is not None:
                    c.tick(time.perf_counter(), saved=True)  # a save's time is no step's

    def _cadence(self, first: int) -> cadence_mod.Cadence | None:
        """resilience.checkpoint_every = "auto" (the job script says so): the Young-Daly
        cadence, starting at ``first`` steps (the recipe's own interval)."""
        mtbf = cadence_mod.auto()
        if mtbf is None:
            return None
        nodes = int(os.environ.get("SLURMTRAIN_NNODES") or 1)
        return cadence_mod.Cadence(mtbf, nodes, self.run_dir, first=first)

    def _save_on_cadence(self, cadence: cadence_mod.Cadence, step: int, save: Callable[[int], None],
                         tier: str = "") -> None:
        """Save (``save``: durable, or into node memory), time what it stalled, and choose the
        next interval: every rank the same, from the slowest rank's stall and step time (the
        figures the event shows: each rank's own choice, the largest winning, once showed rank
        0's figures beside another rank's steps), rank 0 says it when it changes."""
        start = time.perf_counter()
        save(step)
        figures = torch.tensor([time.perf_counter() - start, cadence.step_s() or -1.0], dtype=torch.float64,
                               device=self.world.device)
        dist.all_reduce(figures, op=dist.ReduceOp.MAX)
        cost_s, step_s = figures.tolist()
        chosen = cadence.after_save(cost_s, step_s if step_s > 0 else None)
        # Still the largest: each rank read the run's faults from events.jsonl at its own moment.
        steps = torch.tensor(float(chosen.steps if chosen else cadence.every), device=self.world.device)
        dist.all_reduce(steps, op=dist.ReduceOp.MAX)
        if int(steps.item()) != cadence.every:
            cadence.every = int(steps.item())
            if self._rank0 and chosen is not None:
                said = {**chosen.to_event(), "steps": cadence.every, **({"tier": tier} if tier else {})}
                events.append(self.run_dir, Ev.CHECKPOINT_INTERVAL, **said, after_step=step)
                log.info("%s: %s", "copies in node memory" if tier else "checkpoints", cadence_mod.describe(said))

    def _log(self, metrics: MetricsLog, loop: "_Loop", step: int, loss: torch.Tensor,
             grad_norm: torch.Tensor, lr: float) -> None:
        loss_v = self._mean_over_ranks(loss)
        tok_s, samples_s, step_time = loop.meter.rates()
        mfu = (self.flops_per_token * tok_s / (loop.peak * self.world.size)) if loop.peak else None
        record = {"step": step, "total_steps": self.recipe.train.steps, "loss": loss_v, "lr": lr, "grad_norm": grad_norm.item(),
                  "tokens_per_s": round(tok_s, 1), "samples_per_s": round(samples_s, 3),
                  "step_time": round(step_time, 5), "mfu": mfu,
                  "peak_mem": round(peak_mem_gib(self.world.device), 3),
                  "epoch": round(self.stream.epoch, 4),
                  **self.engine.log_fields(self._mean_over_ranks)}
        metrics.write(record)
        log.info("step %d/%d | loss %.4f | %s tok/s | lr %.3g", step, self.recipe.train.steps,
                 loss_v, f"{tok_s:,.0f}", lr)
        loop.meter.reset()

    def _eval(self, metrics: MetricsLog, step: int) -> None:
        with heartbeat.busy("eval"):
            eval_loss = self.evaluate()
        if eval_loss is None:
            log.warning("evaluation skipped: the held-out slice has fewer than "
                        "micro_batch_size x data-parallel ranks sequences")
            return
        metrics.write({"step": step, "eval_loss": eval_loss})
        log.info("step %d | eval loss %.4f", step, eval_loss)


@dataclass
class _Loop:
    """What the loop measures and decides with, across steps."""
    peak: float | None                        # the device's peak FLOP/s, for MFU
    meter: Throughput
    probe: ComputeProbe
    cadence: cadence_mod.Cadence | None       # resilience.checkpoint_every = "auto"
    memory_cadence: cadence_mod.Cadence | None  # ... for the copies in node memory (train.memory_steps)


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


def _memory_tier(recipe: Recipe, sources: Sources, engine: Any) -> MemoryTier | None:
    """train.memory_steps: the node-memory tier, for the engines whose state is DCP's."""
    if not recipe.train.memory_steps:
        return None
    if not hasattr(engine, "state"):
        raise ConfigError(sources.of("train.memory_steps"), "train.memory_steps",
                          f"{recipe.train.memory_steps} needs the fsdp2 engine (or the torch pipeline): "
                          f"{engine.name} keeps its own state; set it to 0")
    return MemoryTier(engine.state, {"world": dist.get_world_size(), "stages": recipe.pipeline.stages,
                                     "engine": engine.name})


def build(recipe: Recipe, sources: Sources, world: World, run_dir: Path,
          init_ckpt: str | None) -> Trainer:
    """Check the inputs, then compose the run. ``sources`` says where each recipe value
    came from (file, ``--set``, ``--data-path``), for messages."""
    cfg = recipe.train
    accum, tok = preflight(recipe, sources, world.size)
    _, _, microbatches = check_pipeline(recipe, sources, world.size)
    args = model_args(recipe)
    n_params = param_count(args)
    log.info("model: preset %s, %s parameters (%d), %d layers, dim %d; world size %d on %s",
             recipe.model.preset, human_count(n_params), n_params, args.n_layers, args.dim,
             world.size, world.device.type)
    corpus = data_mod.load_corpus(resolve_data_path(recipe.data.path), tok, recipe.data.max_seq_len,
                                  recipe.data.val_fraction, recipe.data.seed,
                                  sources.of("data.path"))
    log.info("data: %s, %d documents, %s tokens (%s): %d training and %d held-out sequences of %d",
             recipe.data.path, corpus.n_docs, f"{corpus.n_tokens:,}", tok.name, len(corpus.train),
             len(corpus.val), recipe.data.max_seq_len)
    if cfg.memory_steps:
        from ..nodememory import start_dir
        log.info("copies in node memory (train.memory_steps): every %d steps between the durable saves, in %s",
                 cfg.memory_steps, start_dir())
    # Hugging Face weights are a start: a run that has a checkpoint resumes from it instead.
    resuming = _checkpoint_found(run_dir)
    engine = engines.build(engines.Context(recipe, sources, world, args, accum, microbatches,
                                           None if resuming else init_ckpt, resuming=resuming))
    # The data position is global: a data-parallel rank reads the same sequences whatever
    # the pipeline depth, and a resume on another layout continues the same sequence.
    stream = data_mod.TrainStream(corpus.train, recipe.data.seed, engine.dp_rank, engine.dp,
                                  cfg.micro_batch_size)
    meta = {"recipe": recipe_to_dict(recipe), "recipe_source": sources.default,
            "model_args": asdict(args), "tokenizer": tok.name, "world_size": world.size,
            "pipeline_stages": recipe.pipeline.stages, **engine.meta}
    ckpt = Checkpointer(run_dir, engine, stream, meta, keep_last=cfg.keep_last,
                        kill_at_step=recipe.debug.kill_in_save_at_step,
                        slow_at_step=recipe.debug.slow_save_at_step, memory=_memory_tier(recipe, sources, engine))
    step = ckpt.resume()
    if resuming and not step:  # the engine drew no parameters: never train on empty memory
        raise RuntimeError(f"a checkpoint was found in {run_dir} before the model was built, "
                           "and none loaded after")
    return Trainer(recipe=recipe, world=world, run_dir=run_dir, engine=engine, stream=stream,
                   val=corpus.val, ckpt=ckpt, accum=accum,
                   flops_per_token=flops_per_token(args, recipe.data.max_seq_len), step=step)


def _checkpoint_found(run_dir: Path) -> bool:
    """Whether rank 0 finds a complete checkpoint, told to every rank: the resume that
    follows loads the one rank 0 chooses then, so all ranks build for the same start."""
    found = [newest_complete(run_dir, warn=False) is not None] if dist.get_rank() == 0 else [None]
    dist.broadcast_object_list(found, src=0)
    return bool(found[0])
