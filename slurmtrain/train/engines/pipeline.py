"""The torch pipeline engine: stages composed with FSDP2 (torch.distributed.pipelining), on
a ``pp x dp`` mesh. Its checkpoints are DCP's, like the FSDP2 engine's.

The ranks form a 2-D mesh, pipeline outer: rank = pp_rank * dp + dp_rank, so with one
stage per node the stages talk across nodes and FSDP2 stays inside each. The blocks are
divided over ``stages x stages_per_rank`` model chunks as evenly as possible (the first
chunks take one more); the embedding goes with the first chunk, the final norm and the
output with the last. Rank ``r`` holds chunks ``r, r + stages, ...`` (the interleaved
schedule's loop order). Each chunk keeps the whole model's attribute names
(``layers`` is a ``ModuleDict`` keyed by the block's index in the whole model), so a
parameter is called ``layers.5.attention.wq.weight`` whatever the layout, and checkpoints
(DCP), ``slurmtrain export`` and resumes on another layout do not care about it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining.schedules import (
    Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B)
from torch.distributed.tensor import DTensor

from .. import optim as optim_mod
from ..data import to_device
from ..distributed import World
from ..model import RotaryCache, Transformer, init_parameters, meta_model
from ...recipes.recipe import PipelineSection
from .base import Context
from .fsdp2 import TorchEngine, load_initial_weights
from .fsdp2 import consolidated  # noqa: F401  (the registry's: DCP, as FSDP2's)

log = logging.getLogger("slurmtrain.train")


def split_blocks(n_layers: int, chunks: int) -> list[range]:
    """Block indices of each model chunk, as even as possible (the first ones take one more)."""
    base, extra = divmod(n_layers, chunks)
    out, start = [], 0
    for i in range(chunks):
        size = base + (1 if i < extra else 0)
        out.append(range(start, start + size))
        start += size
    return out


def theoretical_bubble(schedule: str, stages: int, per_rank: int, microbatches: int) -> float:
    """Idle share of a step the schedule implies with equal stage times: (p - 1) / (m + p - 1)
    for GPipe and 1F1B, (p - 1) / (v m + p - 1) with v chunks per rank interleaved."""
    v = per_rank if schedule == "interleaved-1f1b" else 1
    return (stages - 1) / (v * microbatches + stages - 1)


class BusyClock:
    """Seconds this rank computed (forward and backward of its chunks) during a step: the
    measured bubble is the rest of the step. Backward is timed by two identity autograd
    functions around each chunk's blocks: gradients reach the output's first and the
    input's last."""

    def __init__(self):
        self.busy = 0.0
        self._backward_start: list[float] = []

    def mark_output(self, h: torch.Tensor) -> torch.Tensor:
        return _Mark.apply(h, self, True) if h.requires_grad else h

    def mark_input(self, h: torch.Tensor) -> torch.Tensor:
        return _Mark.apply(h, self, False) if h.requires_grad else h


class _Mark(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, clock, is_output):
        ctx.clock, ctx.is_output = clock, is_output
        return h.view_as(h)

    @staticmethod
    def backward(ctx, grad):
        clock = ctx.clock
        if ctx.is_output:
            clock._backward_start.append(time.perf_counter())
        elif clock._backward_start:
            clock.busy += time.perf_counter() - clock._backward_start.pop()
        return grad, None, None


class Parts(nn.Module):
    """Some of a Transformer's modules under their own names: one model chunk (its
    ``forward`` runs them), or all of a rank's chunks together (for state dicts)."""

    def __init__(self, model: Transformer, blocks: list[int], first: bool, last: bool):
        super().__init__()
        args = model.args
        self.tok_embeddings = model.tok_embeddings if first else None
        self.rope = RotaryCache(args.head_dim, args.max_seq_len, args.rope_theta)
        self.layers = nn.ModuleDict({str(i): model.layers[i] for i in blocks})
        self.norm = model.norm if last else None
        self.output = model.output if last else None
        self.clock: BusyClock | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        start = time.perf_counter()
        h = self.tok_embeddings(x) if self.tok_embeddings is not None else x
        if self.clock is not None:
            h = self.clock.mark_input(h)
        cos, sin = self.rope(h.shape[1])
        for layer in self.layers.values():
            h = layer(h, cos, sin)
        out = self.output(self.norm(h)) if self.output is not None else h
        if self.clock is not None:
            out = self.clock.mark_output(out)
            self.clock.busy += time.perf_counter() - start
        return out


IGNORE = -100  # F.cross_entropy's ignore_index: padded evaluation rows


class CrossEntropy:
    """The last stage's loss: the mean over a micro-batch's tokens when training (the
    schedule scales gradients by the micro-batch count), the sum while evaluating padded
    rows (:meth:`Pipeline.eval_loss` divides by the real tokens)."""

    reduction = "mean"

    def __call__(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.flatten(0, 1).float(), target.flatten(),
                               ignore_index=IGNORE, reduction=self.reduction)


@dataclass
class Pipeline:
    """This rank's share of a pipelined model and the schedule that runs a step over it."""
    local: Parts            # all of this rank's modules, under the whole model's names
    chunks: list[Parts]     # the model chunks this rank runs, in stage order
    schedule: object
    first: bool             # holds the first chunk: feeds the tokens in
    last: bool              # holds the last chunk: computes the loss
    pp_group: dist.ProcessGroup
    stages: int
    dp_rank: int
    dp: int
    microbatches: int
    bubble: float           # the schedule's theoretical bubble
    loss_fn: "CrossEntropy"
    clock: BusyClock | None = None
    _eval_padding_noted: bool = False

    def train_step(self, tokens: torch.Tensor, device: torch.device
                   ) -> tuple[torch.Tensor, float]:
        """Forward and backward of one step's batch (this data-parallel rank's share);
        returns the mean loss, the same on every stage, and the measured bubble: the share
        of the schedule's time this rank did not compute."""
        tokens = to_device(tokens, device)  # pinned on a GPU: the copy does not wait
        x, y = tokens[:, :-1], tokens[:, 1:]
        losses: list[torch.Tensor] = []
        args = (x,) if self.first else ()
        kwargs = {"target": y, "losses": losses} if self.last else {}
        self.clock = BusyClock()
        for chunk in self.chunks:
            chunk.clock = self.clock
        start = time.perf_counter()
        try:
            self.schedule.step(*args, return_outputs=False, **kwargs)
        finally:
            for chunk in self.chunks:
                chunk.clock = None
        seconds = time.perf_counter() - start
        idle = max(0.0, 1.0 - self.clock.busy / seconds) if seconds > 0 else 0.0
        return self._shared_loss(losses, device), idle

    @torch.no_grad()
    def eval_loss(self, tokens: torch.Tensor, device: torch.device) -> torch.Tensor:
        """Mean loss over every target token of ``tokens`` (this data-parallel rank's
        held-out rows), as one stage computes it. Rows that do not divide into the
        schedule's micro-batches are padded with copies of the last row whose targets are
        ignored; the micro-batches' losses are sums, divided by the real tokens only."""
        tokens = tokens.to(device)
        x, y = tokens[:, :-1], tokens[:, 1:]
        pad = -len(tokens) % self.microbatches
        if pad:
            if self.first and self.dp_rank == 0 and not self._eval_padding_noted:
                log.info("evaluation: %d held-out sequences per data-parallel rank padded to "
                         "%d (a multiple of the %d pipeline micro-batches); the padding is not "
                         "counted in eval_loss", len(tokens), len(tokens) + pad,
                         self.microbatches)
                self._eval_padding_noted = True
            x = torch.cat([x, x[-1:].expand(pad, -1)])
            y = torch.cat([y, torch.full((pad, y.shape[1]), IGNORE, dtype=y.dtype,
                                         device=device)])
        losses: list[torch.Tensor] = []
        args = (x,) if self.first else ()
        kwargs = {"target": y, "losses": losses} if self.last else {}
        self.loss_fn.reduction = "sum"
        try:
            self.schedule.eval(*args, **kwargs)
        finally:
            self.loss_fn.reduction = "mean"
        total = (torch.stack([v.float() for v in losses]).sum() / y[:len(tokens)].numel()
                 if self.last else torch.zeros((), device=device))
        dist.all_reduce(total, group=self.pp_group)  # from the last stage to all
        return total

    def _shared_loss(self, losses: list[torch.Tensor], device) -> torch.Tensor:
        # The loss exists on the last stage only; a sum over the pipeline gives it to all.
        loss = (torch.stack([v.detach().float() for v in losses]).mean() if self.last
                else torch.zeros((), device=device))
        dist.all_reduce(loss, group=self.pp_group)
        return loss

    def clip_grads(self, max_norm: float) -> torch.Tensor:
        """Clip by the norm over the whole model: each stage's norm (over its FSDP shards),
        squared and summed over the pipeline."""
        params = [p for p in self.local.parameters() if p.grad is not None]
        norm = torch.nn.utils.get_total_norm([p.grad for p in params], 2.0)
        if isinstance(norm, DTensor):
            norm = norm.full_tensor()
        square = norm.float() ** 2
        dist.all_reduce(square, group=self.pp_group)
        total = square.sqrt()
        torch.nn.utils.clip_grads_with_norm_(params, max_norm, total)
        return total


def _describe(split: list[range], stages: int) -> None:
    last = len(split) - 1
    for c, blocks in enumerate(split):
        what = [f"blocks {blocks.start}-{blocks.stop - 1}" if len(blocks) > 1
                else f"block {blocks.start}"]
        if c == 0:
            what.insert(0, "embedding")
        if c == last:
            what.append("final norm and output")
        log.info("pipeline: stage %d (on pipeline rank %d) holds %s", c, c % stages,
                 ", ".join(what))


def _materialise(local: Parts, chunks: list[Parts], args, seed: int | None, device, *,
                 compile: bool, activation_checkpointing: bool) -> None:
    """Storage and initial values for this rank's modules (none for ``seed`` None: a
    checkpoint sets them), then compile and activation checkpointing block by block."""
    # Initialised before any wrapper, under the blocks' own names: every parameter gets
    # the numbers any other layout gives it.
    local.to_empty(device=device)
    if seed is not None:
        init_parameters(local, args, seed)
    for chunk in chunks:
        chunk.rope.to_empty(device=device)
        chunk.rope.init_weights()
    for name, block in list(local.layers.items()):
        if compile:
            block.compile(fullgraph=True)
        if activation_checkpointing:
            wrapped = checkpoint_wrapper(block, preserve_rng_state=False)
            for part in [local, *chunks]:
                if name in part.layers:
                    part.layers[name] = wrapped


def _shard(chunks: list[Parts], dp_mesh, param_dtype: torch.dtype | None) -> None:
    """FSDP2 over the data-parallel ranks of each chunk's stage."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mp = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32) \
        if param_dtype is not None else MixedPrecisionPolicy()
    for chunk in chunks:
        # Every micro-batch runs forward again: keep the gathered parameters (torchtitan
        # does the same under a pipeline).
        for block in chunk.layers.values():
            fully_shard(block, mesh=dp_mesh, mp_policy=mp, reshard_after_forward=False)
        fully_shard(chunk, mesh=dp_mesh, mp_policy=mp, reshard_after_forward=False)


def _schedule(pp: PipelineSection, stages: list, microbatches: int, loss_fn: CrossEntropy):
    if pp.schedule == "interleaved-1f1b":
        return ScheduleInterleaved1F1B(stages, microbatches, loss_fn=loss_fn)
    cls = ScheduleGPipe if pp.schedule == "gpipe" else Schedule1F1B
    return cls(stages[0], microbatches, loss_fn=loss_fn)


def build_pipeline(model: Transformer, pp: PipelineSection, world: World, microbatches: int, *,
                   seed: int | None, param_dtype: torch.dtype | None, activation_checkpointing: bool,
                   compile: bool) -> Pipeline:
    """Split ``model`` (built on the meta device) into this rank's chunks, materialise and
    initialise them (``seed`` None: a checkpoint sets them), shard each over its
    data-parallel group and build the schedule."""
    dp = world.size // pp.stages
    mesh = init_device_mesh(world.device.type, (pp.stages, dp), mesh_dim_names=("pp", "dp"))
    pp_rank, dp_rank = mesh["pp"].get_local_rank(), mesh["dp"].get_local_rank()
    n_chunks = pp.stages * pp.stages_per_rank
    split = split_blocks(model.args.n_layers, n_chunks)
    mine = [pp_rank + k * pp.stages for k in range(pp.stages_per_rank)]
    if world.rank == 0:
        _describe(split, pp.stages)
    local = Parts(model, [i for c in mine for i in split[c]], first=0 in mine,
                  last=n_chunks - 1 in mine)
    chunks = [Parts(model, list(split[c]), first=c == 0, last=c == n_chunks - 1) for c in mine]
    _materialise(local, chunks, model.args, seed, world.device, compile=compile,
                 activation_checkpointing=activation_checkpointing)
    if dp > 1 or param_dtype is not None:
        _shard(chunks, mesh["dp"], param_dtype)
    group = mesh["pp"].get_group()
    stages = [PipelineStage(chunk, c, n_chunks, world.device, group=group)
              for chunk, c in zip(chunks, mine)]
    loss_fn = CrossEntropy()
    return Pipeline(local=local, chunks=chunks, schedule=_schedule(pp, stages, microbatches, loss_fn),
                    first=0 in mine, last=n_chunks - 1 in mine, pp_group=group, stages=pp.stages,
                    dp_rank=dp_rank, dp=dp, microbatches=microbatches,
                    bubble=theoretical_bubble(pp.schedule, pp.stages, pp.stages_per_rank,
                                              microbatches), loss_fn=loss_fn)


class PipelineEngine(TorchEngine):
    """The engine protocol over a :class:`Pipeline`: this data-parallel rank's whole share
    of a step goes to the schedule, which cuts it into ``pipeline.microbatches``
    micro-batches and scales the gradients by their number."""

    name = "pipeline"

    def __init__(self, ctx: Context, pipe: Pipeline):
        super().__init__(ctx, pipe.local, pipe.dp_rank, pipe.dp)
        self.pipe = pipe
        self.bubble = 0.0  # measured idle share of this rank's last step

    def train_step(self, micro_batches: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        loss, self.bubble = self.pipe.train_step(torch.cat(micro_batches), self.device)
        grad_norm = self.pipe.clip_grads(self.grad_clip)
        self._step_optimizer()
        return loss, grad_norm

    def eval_loss(self, batches: list[torch.Tensor]) -> torch.Tensor:
        # Padded to the micro-batch count if need be.
        return self.pipe.eval_loss(torch.cat(batches), self.device)

    def log_fields(self, mean_over_ranks) -> dict:
        # Measured: the idle share of the step's schedule on each rank (the step in the
        # log), averaged over ranks; and the schedule's own figure.
        return {"bubble": round(mean_over_ranks(torch.tensor(self.bubble)), 4),
                "bubble_theoretical": round(self.pipe.bubble, 4)}


def build(ctx: Context) -> PipelineEngine:
    cfg = ctx.recipe.train
    pipe = build_pipeline(meta_model(ctx.args), ctx.recipe.pipeline, ctx.world, ctx.microbatches,
                          seed=None if ctx.resuming else cfg.seed,
                          param_dtype=optim_mod.compute_dtype(cfg.dtype, ctx.world.device),
                          activation_checkpointing=cfg.activation_checkpointing,
                          compile=cfg.compile)
    if ctx.init_ckpt:
        load_initial_weights(pipe.local, ctx, whole_model=False)
    return PipelineEngine(ctx, pipe)
