"""What every engine answers (:class:`Engine`) and what it is built from (:class:`Context`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol


class Engine(Protocol):
    name: str
    meta: dict[str, Any]  # what train_meta.json says of it (``engine`` at least)
    model: Any    # the modules this rank holds (under the whole model's names)
    dp_rank: int  # this rank's place among the data-parallel ranks: what data it reads
    dp: int
    scheduler: Any  # the LambdaLR of optim.schedule, over the engine's torch optimizer

    def train_step(self, micro_batches: list[Any]) -> tuple[Any, Any]:
        """One optimizer step over this rank's micro-batches: (mean loss, gradient norm)
        tensors, the same on every rank of a pipeline."""

    def eval_loss(self, batches: list[Any]) -> Any:
        """Mean loss over this data-parallel rank's held-out batches (a tensor)."""

    def lr(self) -> float:
        """The learning rate of the next step."""

    def log_fields(self, mean_over_ranks: Any) -> dict[str, Any]:
        """Extra fields for a metrics record (a pipeline's bubble); ``mean_over_ranks``
        averages a tensor over every rank (a collective)."""

    def save(self, path: Path, client: dict[str, Any]) -> Any:
        """Write this rank's part into the folder ``path``, ``client`` (step, data position)
        with it; returns a future when the save goes on in the background, else None."""

    def load(self, path: Path, client: dict[str, Any]) -> dict[str, Any]:
        """Restore from ``path``; returns the client state given to :meth:`save`
        (``client``: a template of it)."""


@dataclass
class Context:
    """What an engine is built from."""
    recipe: Any
    sources: Any          # where each recipe value came from, for messages
    world: Any            # distributed.World
    args: Any             # presets.ModelArgs
    accum: int            # micro-batches per step on each data-parallel rank
    microbatches: int     # a torch pipeline's micro-batches per step
    init_ckpt: str | None  # Hugging Face weights to start from (only when no checkpoint exists)
    # A checkpoint will be loaded over every parameter (rank 0 found one): the torch engines
    # draw no initial values, which costs seconds a restart at scale (each rank its shard, on
    # the CPU). DeepSpeed's engine initialises anyway: its optimizer copies the weights first.
    resuming: bool = False
