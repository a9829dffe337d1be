"""The built-in trainer's engines: FSDP2, torch pipeline stages, DeepSpeed.

An engine owns the model's parallel wrapping, its optimizer and schedule, the train step,
the evaluation loss, and what a checkpoint folder holds for it; the ``Trainer`` keeps the
loop, data, metrics, stop handling and the checkpoint folder contract (``step_<N>/``,
``train_meta.json``, the ``COMPLETE`` marker last: ``checkpoint.Checkpointer``).

:data:`ENGINES` names each engine's module; :func:`engine_name` picks one for a recipe.
This package is torch-free at import (``ds_config`` is read when a recipe loads); an
engine's module is imported when it is built.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

from .base import Context, Engine

# name -> module: ``build(ctx) -> Engine`` and ``consolidated(path, args) -> state dict``.
ENGINES = {
    "fsdp2": "slurmtrain.train.engines.fsdp2",
    "pipeline": "slurmtrain.train.engines.pipeline",
    "deepspeed": "slurmtrain.train.engines.deepspeed_engine",
}


def engine_name(recipe: Any) -> str:
    if recipe.train.engine == "deepspeed":
        return "deepspeed"
    return "pipeline" if recipe.pipeline.stages > 1 else "fsdp2"


def build(ctx: Context) -> Engine:
    """The engine of ``ctx.recipe``: its module imported, then built."""
    return importlib.import_module(ENGINES[engine_name(ctx.recipe)]).build(ctx)


def load_consolidated(run_dir: str | Path):
    """(ModelArgs, full model state dict on CPU) from the newest complete checkpoint of
    any engine, read in this one process (no process group): ``slurmtrain export``."""
    from ...errors import ConfigError
    from ..checkpoint import META, checkpoints_dir, newest_complete
    from ...recipes.presets import ModelArgs
    found = newest_complete(Path(run_dir))
    if found is None:
        raise ConfigError(str(run_dir), "", "no complete checkpoint in "
                          f"{checkpoints_dir(Path(run_dir))}")
    _, path = found
    meta = json.loads((path / META).read_text())
    args = ModelArgs(**meta["model_args"])
    # Checkpoints written before the meta named its engine are the FSDP2 path's (DCP).
    module = importlib.import_module(ENGINES[meta.get("engine", "fsdp2")])
    return args, module.consolidated(path, args)
