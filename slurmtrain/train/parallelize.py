"""Composes activation checkpointing, torch.compile and FSDP2 on a Transformer, in that order.

Each step is a small function taking exactly what it needs. The order matters: the
checkpoint wrapper and compile apply per block, and FSDP2 then shards each (wrapped,
compiled) block as one unit and finally the root (embeddings, final norm, output).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard


def apply_ac(model: nn.Module) -> None:
    """Recompute each block's activations in backward: memory for compute."""
    for i, block in enumerate(model.layers):
        model.layers[i] = checkpoint_wrapper(block, preserve_rng_state=False)


def apply_compile(model: nn.Module) -> None:
    """Compile block by block: every block has the same code, so one graph is reused."""
    for block in model.layers:
        block.compile(fullgraph=True)


def apply_fsdp(model: nn.Module, mesh: DeviceMesh, param_dtype: torch.dtype | None) -> None:
    """One FSDP2 unit per block, then the root. ``param_dtype`` (bf16 on GPUs) casts
    parameters for compute; gradients are reduced in fp32 and the master weights stay fp32."""
    mp = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32) \
        if param_dtype is not None else MixedPrecisionPolicy()
    last = len(model.layers) - 1
    for i, block in enumerate(model.layers):
        # The last block's parameters are needed again right away by backward: keep them.
        fully_shard(block, mesh=mesh, mp_policy=mp, reshard_after_forward=i < last)
    fully_shard(model, mesh=mesh, mp_policy=mp)


def parallelize(model: nn.Module, mesh: DeviceMesh, *, param_dtype: torch.dtype | None,
                activation_checkpointing: bool, compile: bool) -> bool:
    """Returns whether the model was sharded. On one rank it is not (as in torchtitan):
    FSDP2 would only add copies and hooks (a quarter of the step time of the tiny preset
    on CPU); the trainer then gets mixed precision from autocast instead."""
    if activation_checkpointing:
        apply_ac(model)
    if compile:
        apply_compile(model)
    if mesh.size() == 1:
        return False
    apply_fsdp(model, mesh, param_dtype)
    return True
