"""The Llama architecture in plain PyTorch, numerically the same as Hugging Face's
``LlamaForCausalLM`` so that its checkpoints load without any permutation of weights.

Build on the meta device, shard, then materialise::

    model = meta_model(args)                           # no storage, no init
    for block in model.layers: fully_shard(block)      # optional, FSDP2
    fully_shard(model)
    model.to_empty(device="cuda")
    model.init_weights(seed=0)                         # parameters and the rotary cache

Initial values do not depend on the layout (:func:`init_parameters`): a parameter's numbers
are a function of the seed, its name and its full shape, and a shard draws only the rows
it holds, so any world size, pipeline depth or engine starts from the same weights.

Names follow Meta's reference code (``tok_embeddings``, ``layers.N.attention.wq``,
``layers.N.feed_forward.w1``, ``norm``, ``output``); :mod:`slurmtrain.train.hf` maps
them to Hugging Face's. Unlike Meta's original checkpoints, the rotary embedding uses
HF's rotate-half layout (first half of each head's dims paired with the second half),
so q/k weights are stored exactly as HF stores them.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from ..recipes.presets import ModelArgs


class RMSNorm(nn.Module):
    """Root-mean-square norm, computed in float32 like HF's ``LlamaRMSNorm``."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


class RotaryCache(nn.Module):
    """cos/sin tables [max_seq_len, head_dim] for rotary embeddings, always float32.

    Non-persistent buffers: they are not in the state dict, and :meth:`init_weights`
    recomputes them (needed after building on the meta device and ``to_empty``).
    ``model.to(torch.bfloat16)`` keeps them in float32: positions past a few hundred
    lose their angle in bfloat16.
    """

    def __init__(self, head_dim: int, max_seq_len: int, theta: float):
        super().__init__()
        self.head_dim, self.max_seq_len, self.theta = head_dim, max_seq_len, theta
        cos, sin = self._tables(torch.get_default_device())
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def _tables(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        if device.type == "meta":  # shapes only: meta's arange would import torch._dynamo
            shape = (self.max_seq_len, self.head_dim)
            return (torch.empty(shape, device=device, dtype=torch.float32),
                    torch.empty(shape, device=device, dtype=torch.float32))
        # Same arithmetic as HF's compute_default_rope_parameters + LlamaRotaryEmbedding.
        exponent = torch.arange(0, self.head_dim, 2, dtype=torch.int64, device=device).float()
        inv_freq = 1.0 / (self.theta ** (exponent / self.head_dim))
        positions = torch.arange(self.max_seq_len, dtype=torch.int64, device=device).float()
        angles = torch.outer(positions, inv_freq)
        angles = torch.cat((angles, angles), dim=-1)
        return angles.cos(), angles.sin()

    def init_weights(self) -> None:
        cos, sin = self._tables(self.cos.device)
        self.cos, self.sin = cos, sin

    def _apply(self, fn, recurse=True):
        before = {name: buf for name, buf in self._buffers.items()}
        super()._apply(fn, recurse)
        for name, old in before.items():
            new = self._buffers[name]
            if new is not None and old is not None and new.dtype != old.dtype:
                self._buffers[name] = old.to(new.device)  # a dtype cast: keep float32
        return self

    def forward(self, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
        if seq_len > self.max_seq_len:
            raise ValueError(f"sequence of {seq_len} tokens is longer than max_seq_len = "
                             f"{self.max_seq_len}")
        return self.cos[:seq_len], self.sin[:seq_len]


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` [B, heads, T, head_dim] by position, in float32 (HF's rotate_half form)."""
    h = x.float()
    first, second = h.chunk(2, dim=-1)
    rotated = torch.cat((-second, first), dim=-1)
    return (h * cos + rotated * sin).to(x.dtype)


class Attention(nn.Module):
    """Causal grouped-query self-attention through ``scaled_dot_product_attention``."""

    def __init__(self, args: ModelArgs):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = args.n_heads, args.n_kv_heads, args.head_dim
        self.wq = nn.Linear(args.dim, args.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(args.dim, args.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(args.dim, args.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(args.n_heads * self.head_dim, args.dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        q = self.wq(x).view(batch, seq, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(batch, seq, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(batch, seq, self.n_kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        # enable_gqa lets the kernel share each k/v head across its group of query
        # heads instead of materialising repeated copies.
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                             enable_gqa=self.n_kv_heads != self.n_heads)
        return self.wo(out.transpose(1, 2).reshape(batch, seq, -1))


class FeedForward(nn.Module):
    """SwiGLU: w2(silu(w1 x) * w3 x); w1 = HF gate_proj, w3 = up_proj, w2 = down_proj."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    """Pre-norm block: x + attention(norm(x)), then + feed_forward(norm(.))."""

    def __init__(self, args: ModelArgs):
        super().__init__()
        self.attention_norm = RMSNorm(args.dim, args.norm_eps)
        self.attention = Attention(args)
        self.ffn_norm = RMSNorm(args.dim, args.norm_eps)
        self.feed_forward = FeedForward(args.dim, args.ffn_dim)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x), cos, sin)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    """Llama decoder: ``forward(tokens [B, T] int64) -> logits [B, T, vocab_size]``.

    ``layers`` is an ``nn.ModuleList`` of :class:`TransformerBlock`, one FSDP unit each.
    With ``args.tie_embeddings`` the output projection *is* the embedding parameter
    (shard ``tok_embeddings`` and ``output`` in the same FSDP unit, e.g. the root).
    """

    def __init__(self, args: ModelArgs):
        super().__init__()
        self.args = args
        self.tok_embeddings = nn.Embedding(args.vocab_size, args.dim)
        self.rope = RotaryCache(args.head_dim, args.max_seq_len, args.rope_theta)
        self.layers = nn.ModuleList(TransformerBlock(args) for _ in range(args.n_layers))
        self.norm = RMSNorm(args.dim, args.norm_eps)
        self.output = nn.Linear(args.dim, args.vocab_size, bias=False)
        if args.tie_embeddings:
            self.output.weight = self.tok_embeddings.weight

    def _apply(self, fn, recurse=True):
        super()._apply(fn, recurse)
        # Moving off the meta device (to_empty) gives each module a new Parameter, which
        # unties a shared matrix; tie it again. (DTensor parameters are swapped in place
        # and stay tied.)
        if self.args.tie_embeddings and self.output.weight is not self.tok_embeddings.weight:
            self.output.weight = self.tok_embeddings.weight
        return self

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        cos, sin = self.rope(tokens.shape[1])
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h, cos, sin)
        return self.output(self.norm(h))

    @torch.no_grad()
    def init_weights(self, seed: int = 0) -> None:
        """Initialise every parameter (:func:`init_parameters`, sharded or not) and the
        rotary cache in place. torch's global generator is left alone."""
        init_parameters(self, self.args, seed)
        self.rope.init_weights()


# A parameter is drawn in blocks of whole rows of about this many numbers, each block from
# a generator of its own: a shard draws the blocks that overlap its rows, never the whole.
BLOCK_ELEMENTS = 1 << 20
_RESIDUAL_OUTPUTS = ("attention.wo.weight", "feed_forward.w2.weight")


def canonical_name(name: str) -> str:
    """A parameter's name in the plain model: without the wrappers' own attribute names
    (activation checkpointing, torch.compile), which differ between recipes."""
    return name.replace("_checkpoint_wrapped_module.", "").replace("_orig_mod.", "")


def _block_seed(seed: int, name: str, block: int) -> int:
    digest = hashlib.blake2b(f"{seed}/{name}/{block}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


def normal_rows(seed: int, name: str, shape: tuple[int, ...], std: float,
                offset: tuple[int, ...], local: tuple[int, ...]) -> torch.Tensor:
    """The slice ``[offset : offset + local]`` of parameter ``name``'s full N(0, std) draw
    (float32, on the CPU), computing only the row blocks the slice touches. A block is
    always drawn whole, at the size the full shape gives it: torch's CPU normal draws
    small and large tensors by different paths, so the same numbers need the same size."""
    row = math.prod(shape[1:])
    per = max(1, BLOCK_ELEMENTS // max(1, row))
    start, stop = offset[0], offset[0] + local[0]
    parts, gen = [], torch.Generator()
    for block in range(start // per, -(-stop // per)):
        lo, hi = block * per, min(shape[0], (block + 1) * per)
        gen.manual_seed(_block_seed(seed, name, block))
        drawn = torch.empty((hi - lo, *shape[1:])).normal_(0.0, std, generator=gen)
        parts.append(drawn[max(start, lo) - lo:min(stop, hi) - lo])
    out = torch.cat(parts) if parts else torch.empty((0, *shape[1:]))
    for dim in range(1, len(shape)):
        out = out.narrow(dim, offset[dim], local[dim])
    return out


def _local_slice(param: torch.Tensor) -> tuple[torch.Tensor, tuple[int, ...], tuple[int, ...]]:
    """(the tensor this rank writes, its offset in the full parameter, its shape)."""
    from torch.distributed.tensor import DTensor
    if isinstance(param, DTensor):
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
        local, offset = compute_local_shape_and_global_offset(
            param.shape, param.device_mesh, param.placements)
        return param.to_local(), tuple(offset), tuple(local)
    return param, (0,) * param.dim(), tuple(param.shape)


@torch.no_grad()
def init_parameters(module: nn.Module, args: ModelArgs, seed: int,
                    rename: Callable[[str], str] = canonical_name) -> None:
    """Initialise the parameters ``module`` holds (the whole model, a pipeline stage's
    modules, FSDP2 shards) by name, whatever the layout: norms start at one; weight
    matrices ~ N(0, init_std), the projections that write into the residual stream
    (``wo``, ``w2``) N(0, init_std / sqrt(2 * n_layers)) so the stream's variance does not
    grow with depth. ``rename`` maps ``module``'s names to the plain model's."""
    std = args.init_std
    out_std = std / math.sqrt(2 * args.n_layers)
    for name, param in module.named_parameters():
        key = rename(name)
        target, offset, local = _local_slice(param)
        if key.endswith("norm.weight"):
            target.fill_(1.0)
            continue
        sd = out_std if key.endswith(_RESIDUAL_OUTPUTS) else std
        target.copy_(normal_rows(seed, key, tuple(param.shape), sd, offset, local))


def meta_model(args: ModelArgs) -> Transformer:
    """``Transformer(args)`` on the meta device, skipping the default initialisation that
    ``nn.Linear`` and ``nn.Embedding`` run as they are built: on meta it computes nothing,
    yet torch's meta kernels for the random fills import ``torch._dynamo``: about a second
    of a one-rank or DeepSpeed start (FSDP2 imports it anyway). ``init_weights`` sets every
    parameter once the model has storage."""
    with torch.device("meta"), _default_init_skipped():
        return Transformer(args)


@contextlib.contextmanager
def _default_init_skipped():
    names = ("normal_", "uniform_", "kaiming_uniform_", "trunc_normal_", "xavier_uniform_")
    saved = {n: getattr(nn.init, n) for n in names}
    try:
        for n in names:
            setattr(nn.init, n, lambda tensor, *args, **kwargs: tensor)
        yield
    finally:
        for n, fn in saved.items():
            setattr(nn.init, n, fn)


def count_parameters(model: nn.Module) -> int:
    """Distinct parameters (a tied matrix counts once); equals presets.param_count."""
    return sum(p.numel() for p in model.parameters())
