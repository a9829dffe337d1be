"""DeepSpeed's pipeline engine for ``train.engine = "deepspeed"`` with ``pipeline.stages > 1``:
a ``PipelineModule`` of one ``LayerSpec`` per block, the embedding first, norm and output
last, starting from the whole model's ``init_weights(seed)`` numbers (as the torch-native
pipeline does). DeepSpeed runs its own 1F1B-style schedule over
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

from ..model import RMSNorm, RotaryCache, Transformer, TransformerBlock
from .deepspeed_engine import DeepSpeedCheckpoints


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
    whole = Transformer(args)
    whole.init_weights(seed=seed)  # every stage takes its slice of the whole model's numbers
    full = whole.state_dict()
    local = {k: full[to_model_names(k, args.n_layers)] for k in module.state_dict()}
    module.load_state_dict(local)
    return module


class DeepSpeedPipe(DeepSpeedCheckpoints):
    """The engine protocol over a ``PipelineEngine``: ``train_batch`` pulls
    ``gradient_accumulation_steps`` micro-batches of (inputs, labels) on the first and
    last stage and returns the loss averaged over them and the data-parallel ranks."""

    @staticmethod
    def _pairs(micro_batches: list[torch.Tensor]):
        return iter([(t[:, :-1], t[:, 1:]) for t in micro_batches])

    def train_step(self, micro_batches: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        loss = self.engine.train_batch(self._pairs(micro_batches))
        norm = self.engine.get_global_grad_norm()
        return loss.detach().float(), torch.as_tensor(0.0 if norm is None else norm,
                                                      dtype=torch.float32)

    def eval_loss(self, micro_batches: list[torch.Tensor]) -> torch.Tensor:
        return self.engine.eval_batch(self._pairs(micro_batches),
                                      num_micro_batches=len(micro_batches)).float()


def consolidated_pipe_state(path: Path, n_layers: int) -> dict[str, torch.Tensor]:
    """The whole model from a pipeline checkpoint: each ``layer_XX-model_states.pt`` holds
    one PipelineModule layer's full weights (ZeRO <= 1 leaves them unsharded)."""
    state = {}
    for f in sorted(path.glob("layer_*-model_states.pt")):
        idx = int(re.match(r"layer_(\d+)-", f.name).group(1))
        for k, v in torch.load(f, map_location="cpu", weights_only=True).items():
            state[to_model_names(f"{idx}.{k}", n_layers)] = v.float()
    return state
