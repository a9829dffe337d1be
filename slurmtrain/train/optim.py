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


# The [train] keys the optimizer and its schedule are built from. A checkpoint brings back
# the values it was saved with (LambdaLR's state holds its WarmupCosine, the optimizer's its
# param groups); a recipe edited since (a run made longer, its lr lowered) is followed from
# the step reached, and the resume says so (checkpoint.schedule_changes).
SCHEDULE_KEYS = ("steps", "warmup_steps", "lr", "min_lr", "beta1", "beta2", "weight_decay")


def follow_recipe(scheduler: torch.optim.lr_scheduler.LambdaLR, train: dict[str, Any]) -> None:
    """The recipe's ``[train]`` values (a dict of SCHEDULE_KEYS) in place of those a loaded
    checkpoint brought back, in the schedule and in its optimizer's param groups; the learning
    rate of the step reached recomputed from them."""
    for fn in scheduler.lr_lambdas:
        fn.warmup, fn.steps, fn.min_ratio = train["warmup_steps"], train["steps"], train["min_lr"] / train["lr"]
    scheduler.base_lrs = [float(train["lr"])] * len(scheduler.base_lrs)
    lrs = [base * fn(scheduler.last_epoch) for base, fn in zip(scheduler.base_lrs, scheduler.lr_lambdas)]
    for group, lr in zip(scheduler.optimizer.param_groups, lrs):
        group.update(lr=lr, initial_lr=float(train["lr"]), betas=(train["beta1"], train["beta2"]),
                     weight_decay=train["weight_decay"])
    scheduler._last_lr = lrs  # what get_last_lr() reports until the next step


def compute_dtype(name: str, device: torch.device) -> torch.dtype | None:
    """The parameters' compute dtype (FSDP2's ``param_dtype``): None means plain fp32."""
    if name == "bfloat16" or (name == "auto" and device.type == "cuda"):
        return torch.bfloat16
    return None
