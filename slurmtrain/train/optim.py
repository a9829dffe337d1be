"""The optimizer every engine steps: torch's AdamW with linear warm-up then cosine decay,
and the compute dtype a recipe asks for."""

from __future__ import annotations

import math
from typing import Any

import torch


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


def adamw(params: Any, cfg: Any, fused: bool | None = None) -> torch.optim.AdamW:
    """AdamW with the recipe's ``[train]`` hyper-parameters."""
    return torch.optim.AdamW(params, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2),
                             weight_decay=cfg.weight_decay, fused=fused)


def schedule(optim: torch.optim.Optimizer, cfg: Any) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(
        optim, WarmupCosine(cfg.warmup_steps, cfg.steps, cfg.min_lr / cfg.lr))


def compute_dtype(name: str, device: torch.device) -> torch.dtype | None:
    """The parameters' compute dtype (FSDP2's ``param_dtype``): None means plain fp32."""
    if name == "bfloat16" or (name == "auto" and device.type == "cuda"):
        return torch.bfloat16
    return None
