"""The trainer's command line (``python -m slurmtrain.train``): its parser and the recipe
keys its options set. Torch-free and here, below the trainer: ``gen`` and ``submit`` read
a trainer command with it (recipes/jobcheck.py) before anything is queued.
"""

from __future__ import annotations

import argparse
import os

OVERRIDES = {  # command-line option -> recipe key
    "data_path": "data.path", "train_steps": "train.steps", "save_steps": "train.save_steps",
    "eval_steps": "train.eval_steps", "log_steps": "train.log_steps", "max_seq_len": "data.max_seq_len",
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def build_parser() -> argparse.ArgumentParser:
    """The trainer's command line; torch-free (``gen`` reads a trainer command with it)."""
    p = argparse.ArgumentParser(prog="python -m slurmtrain.train",
                                description="Train a Llama model from a recipe with FSDP2.", epilog=_recipe_keys(),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--recipe", required=True, help="built-in recipe name or path to a .toml")
    p.add_argument("--run-dir", "--run_dir", dest="run_dir",
                   help="default: $SLURMTRAIN_RUN_DIR, else ./runs/train-<recipe>")
    p.add_argument("--data-path", "--data_path", dest="data_path", help="sets data.path")
    p.add_argument("--init-ckpt", "--init_ckpt", dest="init_ckpt",
                   help="Hugging Face checkpoint folder to start from (ignored when resuming)")
    for dest in ("train_steps", "save_steps", "eval_steps", "log_steps", "max_seq_len"):
        p.add_argument(f"--{dest.replace('_', '-')}", f"--{dest}", dest=dest, type=int,
                       metavar="N", help=f"sets {OVERRIDES[dest]}")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override any recipe key, e.g. --set train.lr=1e-4 (repeatable)")
    # FMEngine's / DeepSpeed's names, so their command lines run as they are.
    p.add_argument("--deepspeed_config", "--deepspeed-config", dest="deepspeed_config",
                   metavar="JSON", help="sets train.engine = deepspeed and deepspeed.config")
    p.add_argument("--pipe_parallel_size", "--pipe-parallel-size", dest="pipe_parallel_size",
                   type=int, metavar="N", help="sets pipeline.stages")
    p.add_argument("--model_parallel_size", "--model-parallel-size", dest="model_parallel_size",
                   type=int, metavar="N", help="tensor parallelism: only 1 (none) is supported")
    p.add_argument("--local_rank", "--local-rank", dest="local_rank", type=int,
                   help=argparse.SUPPRESS)  # the deepspeed launcher passes it; LOCAL_RANK says it too
    return p


def recipe_sets(args: argparse.Namespace) -> list[tuple[str, object, str]]:
    """--set and the options that set one recipe key, as (key, value, origin) triples."""
    from .recipe import parse_sets
    from ..schema import parse_set
    sets = parse_sets(args.sets)
    # A sweep's point (the job script exports it for its array task): over the command's own.
    for line in os.environ.get("SLURMTRAIN_SWEEP_SETS", "").splitlines():
        if line.strip():
            key, value = parse_set(line)
            sets.append((key, value, f"sweep point {line}"))
    for opt, key in OVERRIDES.items():
        value = getattr(args, opt)
        if value is not None:
            sets.append((key, value, f"--{opt.replace('_', '-')}"))
    if getattr(args, "deepspeed_config", None):
        sets.append(("train.engine", "deepspeed", "--deepspeed_config"))
        sets.append(("deepspeed.config", args.deepspeed_config, "--deepspeed_config"))
    if getattr(args, "pipe_parallel_size", None) is not None:
        sets.append(("pipeline.stages", args.pipe_parallel_size, "--pipe_parallel_size"))
    if getattr(args, "model_parallel_size", None) not in (None, 1):
        from ..errors import ConfigError
        raise ConfigError("--model_parallel_size", "", f"{args.model_parallel_size}: tensor "
                          "(model) parallelism is not supported; use 1, ZeRO or pipeline stages")
    return sets


def _recipe_keys() -> str:
    from ..schema import docs
    from .recipe import Recipe
    rows = [f"  {key:<32} {doc}" + (f" (default: {default!r})" if default is not None else "")
            for key, doc, default in docs(Recipe)]
    return "recipe keys (TOML sections [model], [data], [train], [pipeline], [debug]; --set KEY=VALUE):\n" \
        + "\n".join(rows) + "\n\nexit status: 0 finished, 75 stopped after a checkpoint, " \
        "2 bad input, 1 training failed"
