"""Llama model shapes: the ``ModelArgs`` dataclass, named presets and their parameter counts.

Torch-free on purpose: ``slurmtrain models`` reads this module on a login node, and a
recipe loader can check a model's shape without paying for ``import torch``.

A recipe picks a preset by name and overrides single fields on top of it::

    args = override(get_preset("llama2-7b"), {"max_seq_len": 8192}, sources, prefix="model.")

(or plainly ``dataclasses.replace(get_preset("tiny"), n_layers=4)``; both re-run the checks).
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass
from typing import Any, Mapping

from ..errors import ConfigError
from ..schema import Sources, build, field, positive


@dataclass(frozen=True)
class ModelArgs:
    """The shape of a Llama-family decoder (the numbers in a Hugging Face ``config.json``)."""

    dim: int = field("hidden size (width of the residual stream); HF hidden_size", check=positive)
    n_layers: int = field("number of transformer blocks; HF num_hidden_layers", check=positive)
    n_heads: int = field("attention (query) heads; HF num_attention_heads", check=positive)
    n_kv_heads: int = field("key/value heads, fewer than n_heads for grouped-query attention; "
                            "HF num_key_value_heads", check=positive)
    vocab_size: int = field("rows of the embedding and of the output projection; HF vocab_size",
                            check=positive)
    ffn_dim: int = field("inner width of the SwiGLU feed-forward; HF intermediate_size",
                         check=positive)
    norm_eps: float = field("epsilon inside RMSNorm; HF rms_norm_eps", 1e-5, check=positive)
    rope_theta: float = field("base of the rotary position embedding frequencies; HF rope_theta",
                              10000.0, check=positive)
    max_seq_len: int = field("longest sequence the rotary cache covers; HF max_position_embeddings",
                             2048, check=positive)
    tie_embeddings: bool = field("share one matrix between the token embedding and the output "
                                 "projection; HF tie_word_embeddings", False)
    init_std: float = field("standard deviation of the normal initialisation of weight "
                            "matrices (each block's output projections: divided by "
                            "sqrt(2*n_layers))", 0.02, check=positive)

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            check = f.metadata.get("check")
            problem = check(getattr(self, f.name)) if check else None
            if problem:
                raise ConfigError("model", f.name, problem)
        if self.dim % self.n_heads:
            raise ConfigError("model", "dim",
                              f"{self.dim} is not a multiple of n_heads = {self.n_heads}")
        if self.n_heads % self.n_kv_heads:
            raise ConfigError("model", "n_kv_heads",
                              f"n_heads = {self.n_heads} is not a multiple of n_kv_heads = "
                              f"{self.n_kv_heads}")
        if self.head_dim % 2:
            raise ConfigError("model", "dim", f"head size dim / n_heads = {self.head_dim} must be "
                              "even for rotary embeddings")

    @property
    def head_dim(self) -> int:
        """Width of one attention head (dim // n_heads)."""
        return self.dim // self.n_heads


PRESETS: dict[str, ModelArgs] = {
    # For CPU tests: the byte-level tokenizer uses ids 0..255 plus a few specials.
    "tiny": ModelArgs(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=320, ffn_dim=172,
                      max_seq_len=512),
    "tinyllama-1.1b": ModelArgs(dim=2048, n_layers=22, n_heads=32, n_kv_heads=4, vocab_size=32000,
                                ffn_dim=5632, max_seq_len=2048),
    "llama2-7b": ModelArgs(dim=4096, n_layers=32, n_heads=32, n_kv_heads=32, vocab_size=32000,
                           ffn_dim=11008, max_seq_len=4096),
    "llama2-13b": ModelArgs(dim=5120, n_layers=40, n_heads=40, n_kv_heads=40, vocab_size=32000,
                            ffn_dim=13824, max_seq_len=4096),
    "llama2-70b": ModelArgs(dim=8192, n_layers=80, n_heads=64, n_kv_heads=8, vocab_size=32000,
                            ffn_dim=28672, max_seq_len=4096),
    "llama3-8b": ModelArgs(dim=4096, n_layers=32, n_heads=32, n_kv_heads=8, vocab_size=128256,
                           ffn_dim=14336, rope_theta=500000.0, max_seq_len=8192),
}


def get_preset(name: str) -> ModelArgs:
    """The preset called ``name``; ConfigError with a suggestion when there is none."""
    try:
        return PRESETS[name]
    except KeyError:
        close = difflib.get_close_matches(name, list(PRESETS), n=1, cutoff=0.5)
        hint = f' (did you mean "{close[0]}"?)' if close else ""
        raise ConfigError("model", "preset", f"unknown preset {name!r}{hint}; known presets: "
                          + ", ".join(PRESETS)) from None


def override(args: ModelArgs, changes: Mapping[str, Any], sources: Sources | None = None,
             prefix: str = "model.") -> ModelArgs:
    """``args`` with the fields in ``changes`` replaced, type-checked like any recipe value.

    Unknown keys, wrong types and inconsistent shapes raise ConfigError naming the key as
    ``{prefix}{field}`` and the source recorded for it in ``sources``.
    """
    sources = sources or Sources("model overrides")
    data = {**dataclasses.asdict(args), **changes}
    try:
        return build(ModelArgs, data, sources, prefix)
    except ConfigError as err:
        if err.key.startswith(prefix):  # from build: already names source and full key
            raise
        key = prefix + err.key  # from ModelArgs.__post_init__, which knows only the field
        raise ConfigError(sources.of(key), key, err.message) from None


def param_count(args: ModelArgs) -> int:
    """Number of parameters of ``Transformer(args)``, counted without building it.

    A tied output projection is counted once, as ``sum(p.numel() for p in model.parameters())``
    does and as published model cards do.
    """
    d, hd = args.dim, args.head_dim
    attention = d * args.n_heads * hd * 2 + d * args.n_kv_heads * hd * 2  # wq, wo; wk, wv
    feed_forward = 3 * d * args.ffn_dim  # w1 (gate), w3 (up), w2 (down)
    block = attention + feed_forward + 2 * d  # two RMSNorm weights
    embeddings = args.vocab_size * d * (1 if args.tie_embeddings else 2)
    return args.n_layers * block + d + embeddings


def flops_per_token(args: ModelArgs, seq_len: int) -> int:
    """Training FLOPs (forward + backward) per token at ``seq_len``: 6 per weight a token
    passes through plus the attention score/value products (PaLM appendix B, causal
    masking not discounted). The input embedding is a look-up and costs nothing."""
    matmul_params = param_count(args) - args.vocab_size * args.dim * (
        0 if args.tie_embeddings else 1) - (2 * args.n_layers + 1) * args.dim
    return 6 * matmul_params + 12 * args.n_layers * args.dim * seq_len


def human_count(n: int) -> str:
    """``6738415616`` -> ``"6.74B"``; for tables."""
    for unit, size in (("T", 10**12), ("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if n >= size:
            return f"{n / size:.2f}{unit}"
    return str(n)
