"""DeepSpeed's pipeline engine for ``train.engine = "deepspeed"`` with ``pipeline.stages > 1``:
a ``PipelineModule`` of one ``LayerSpec`` per block, the embedding first, norm and output
last, starting from the numbers any other layout starts from (``model.init_parameters``). DeepSpeed runs its own 1F1B-style schedule over
``gradient_accumulation_steps`` micro-batches; ZeRO stage 0 or 1 (checked at load).

Layer ``i`` of the PipelineModule holds: 0 the embedding, 1..n block ``i - 1``, n + 1 the
final norm and output; :func:`to_model_names` maps its names to the ``Transformer``'s.
"""

from __future__ import annotations

import re
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ..model import RMSNorm, RotaryCache, TransformerBlock, init_parameters


class _Embed(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.tok_embeddings = nn.Embedding(args.vocab_size, args.dim)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.tok_embeddings(tokens)


class _Block(TransformerBlock):
    """A block that makes its own rotary tables: only the hidden state crosses stages."""

    def __init__(self, args):
        super().__init__(args)
        self.rope = RotaryCache(args.head_dim, args.max_seq_len, args.rope_theta)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        cos, sin = self.rope(h.shape[1])
        return super().forward(h, cos, sin)


class _Head(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.norm = RMSNorm(args.dim, args.norm_eps)
        self.output = nn.Linear(args.dim, args.vocab_size, bias=False)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.output(self.norm(h))


def _loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())


def to_model_names(name: str, n_layers: int) -> str:
    """``"3.attention.wq.weight"`` (PipelineModule) -> ``"layers.2.attention.wq.weight"``."""
    idx, rest = name.split(".", 1)
    i = int(idx)
    if i == 0 or i == n_layers + 1:
        return rest
    return f"layers.{i - 1}.{rest}"


def build_pipe_module(deepspeed, args, stages: int, seed: int):
    from deepspeed.pipe import LayerSpec, PipelineModule
    specs = [LayerSpec(_Embed, args)] + [LayerSpec(_Block, args) for _ in range(args.n_layers)]
    specs.append(LayerSpec(_Head, args))
    module = PipelineModule(specs, num_stages=stages, loss_fn=_loss, partition_method="uniform")
    # Under the whole model's names: the numbers every other layout starts from.
    init_parameters(module, args, seed, rename=lambda name: to_model_names(name, args.n_layers))
    return module


def consolidated_pipe_state(path: Path, n_layers: int) -> dict[str, torch.Tensor]:
    """The whole model from a pipeline checkpoint: each ``layer_XX-model_states.pt`` holds
    one PipelineModule layer's full weights (ZeRO <= 1 leaves them unsharded)."""
    state = {}
    for f in sorted(path.glob("layer_*-model_states.pt")):
        idx = int(re.match(r"layer_(\d+)-", f.name).group(1))
        for k, v in torch.load(f, map_location="cpu", weights_only=True).items():
            state[to_model_names(f"{idx}.{k}", n_layers)] = v.float()
    return state
