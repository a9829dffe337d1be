"""What the trainer does for speed on this device, in words and numbers (issue 13).

One place for the checks that the trainer's start-up log line and ``scripts/bench_gpu.py``
both report: whether AdamW runs fused (CUDA only here; elsewhere torch's foreach
implementation, and the reason is said), whether each block is compiled, whether
activations are recomputed, and whether flash attention can run the model's attention.
"""

from __future__ import annotations

from typing import Any

import torch


def fused_adamw(device: torch.device) -> tuple[bool, str]:
    """(use fused AdamW, why). Fused keeps the step counter on the device (no host read)
    and does the whole update in a few kernels; it is only taken on CUDA, where it has
    been the reference path for years."""
    if device.type == "cuda":
        return True, "fused AdamW (CUDA)"
    return False, f"foreach AdamW: fused is used on CUDA only, this run is on {device.type}"


def options(recipe: Any, optim: torch.optim.Optimizer, device: torch.device,
            accum: int) -> dict[str, Any]:
    """The speed-relevant configuration of a built run (for logs and benchmark output)."""
    cfg = recipe.train
    fused = bool(optim.defaults.get("fused"))
    return {"device": device.type, "dtype": cfg.dtype, "compile": cfg.compile,
            "activation_checkpointing": cfg.activation_checkpointing,
            "micro_batch": cfg.micro_batch_size, "grad_accum": accum,
            "fused_optimizer": fused, "optimizer_note": fused_adamw(device)[1],
            "attention": "F.scaled_dot_product_attention (is_causal, enable_gqa)"}


def describe(opts: dict[str, Any]) -> str:
    """One log line."""
    return (f"compile {'on' if opts['compile'] else 'off'}, activation checkpointing "
            f"{'on' if opts['activation_checkpointing'] else 'off'}, micro-batch "
            f"{opts['micro_batch']} x {opts['grad_accum']}, dtype {opts['dtype']}, "
            f"{opts['optimizer_note']}")


def flash_attention_usable(n_heads: int, n_kv_heads: int, head_dim: int, seq: int,
                           device: torch.device) -> tuple[bool, str]:
    """Whether SDPA's flash backend accepts the model's attention shape (bf16, causal,
    grouped-query), tried on a batch of one: a forward and backward under
    ``sdpa_kernel(FLASH_ATTENTION)``, which raises when flash cannot take the call."""
    if device.type != "cuda":
        return False, "flash attention is a CUDA backend; on CPU SDPA uses its CPU kernel"
    from torch.nn.attention import SDPBackend, sdpa_kernel
    q = torch.randn(1, n_heads, seq, head_dim, device=device, dtype=torch.bfloat16,
                    requires_grad=True)
    k = torch.randn(1, n_kv_heads, seq, head_dim, device=device, dtype=torch.bfloat16,
                    requires_grad=True)
    v = torch.randn_like(k, requires_grad=True)
    try:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            out = torch.nn.functional.scaled_dot_product_attention(
                q, k, v, is_causal=True, enable_gqa=n_kv_heads != n_heads)
            out.sum().backward()
    except RuntimeError as err:
        return False, f"flash backend refused the shape: {str(err).splitlines()[0]}"
    return True, "flash backend runs the model's attention (forward and backward)"
