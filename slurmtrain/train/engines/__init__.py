"""Training engines besides the built-in FSDP2 path (which stays in ``trainer.py``).

An engine owns the model's parallel wrapping, the optimizer step and its checkpoint
format; the trainer keeps the loop, data, metrics, stop handling and the checkpoint
folder contract (``step_<N>/``, ``train_meta.json``, the ``COMPLETE`` marker last).
This package is torch-free at import: ``ds_config`` is read when a recipe loads.
"""

from __future__ import annotations

from typing import Any, Protocol


class Engine(Protocol):
    def train_step(self, micro_batches: list[Any]) -> tuple[Any, Any]:
        """One optimizer step over the micro-batches: (mean loss, gradient norm) tensors."""

    def save(self, path: Any, client_state: dict[str, Any]) -> None:
        """Write this rank's part of the state into the checkpoint folder ``path``."""

    def load(self, path: Any) -> dict[str, Any]:
        """Restore from ``path``; returns the client state given to :meth:`save`."""
