"""A DeepSpeed config (``--deepspeed_config FILE`` in the command) read before the queue: what
DeepSpeed would refuse on every rank after the wait (not JSON, batch sizes that do not fit
the world size) is refused, and a top-level key DeepSpeed would silently ignore because it
is misspelt (``zero_optimisation``: the run trains without ZeRO) is warned of. Torch-free:
DeepSpeed itself is not imported (the login node need not have it).
"""

from __future__ import annotations

import difflib
import json
import re
from pathlib import Path

from .errors import ConfigError

# DeepSpeed's top-level keys (deepspeed/runtime/config.py and its sections' constants).
KNOWN = frozenset("""
train_batch_size train_micro_batch_size_per_gpu gradient_accumulation_steps optimizer scheduler fp16 bf16
bfloat16 amp gradient_clipping zero_optimization zero_allow_untested_optimizer zero_force_ds_cpu_optimizer
steps_per_print wall_clock_breakdown memory_breakdown dump_state prescale_gradients gradient_predivide_factor
sparse_gradients communication_data_type seq_parallel_communication_data_type activation_checkpointing
flops_profiler tensorboard wandb csv_monitor comet monitor_config aio elasticity pipeline data_efficiency
curriculum_learning compression_training checkpoint data_types autotuning sparse_attention nebula torch_autocast
compile weight_quantization eigenvalue progressive_layer_drop quantize_training timers hybrid_engine
disable_allgather load_universal_checkpoint use_node_local_storage graph_harvesting mics_shard_size
mics_hierarchical_params_gather use_data_before_expert_parallelism zenflow dataloader_drop_last
""".split())
_BATCH = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")


def check(path: str, world: int, ranks: str = "ranks") -> list[str]:
    """Warnings for the config at ``path`` with ``world`` data-parallel ranks (``ranks``:
    the words for them); ConfigError for what DeepSpeed would refuse. A file that is not
    here is not judged (submit refuses it elsewhere)."""
    try:
        text = Path(path).expanduser().read_text()
    except OSError:
        return []
    try:
        config = json.loads(text)
    except ValueError as err:
        line = f" (line {err.lineno}, column {err.colno})" if isinstance(err, json.JSONDecodeError) else ""
        raise ConfigError(path, "", f"not JSON: {getattr(err, 'msg', err)}{line}; DeepSpeed would refuse it on "
                                    "every rank") from None
    if not isinstance(config, dict):
        raise ConfigError(path, "", "a DeepSpeed config is a JSON object")
    _check_batch(path, config, world, ranks)
    out = []
    for key in config:
        close = difflib.get_close_matches(key, KNOWN, n=1, cutoff=0.8) if key not in KNOWN else []
        if close:
            out.append(f"{path}: {key}: not a DeepSpeed key (did you mean {close[0]!r}?); DeepSpeed ignores it, "
                       "so the run goes without it")
    return out


def _check_batch(path: str, config: dict, world: int, ranks: str) -> None:
    """DeepSpeed's rule: train_batch_size = micro batch x accumulation steps x world size;
    two of them give the third, which must be a whole number. ("auto": the Hugging Face
    Trainer fills it in; not judged.)"""
    given = {k: config[k] for k in _BATCH if isinstance(config.get(k), int) and not isinstance(config.get(k), bool)}
    total, micro, steps = (given.get(k) for k in _BATCH)
    if total is None or (micro is None and steps is None):
        return
    if micro is not None and steps is not None:
        if micro * steps * world != total:
            raise ConfigError(path, "train_batch_size", f"{total} is not train_micro_batch_size_per_gpu {micro} x "
                              f"gradient_accumulation_steps {steps} x {world} {ranks} = {micro * steps * world}; "
                              "DeepSpeed would refuse it on every rank")
        return
    known, name = (micro, "train_micro_batch_size_per_gpu") if micro is not None else \
        (steps, "gradient_accumulation_steps")
    if known <= 0 or total % (known * world):
        raise ConfigError(path, "train_batch_size", f"{total} is not a multiple of {name} {known} x {world} {ranks} = "
                          f"{known * world}; DeepSpeed would refuse it on every rank")


# A model split over ranks (pipeline stages, tensor slices) leaves world / (their product)
# data-parallel ranks, the ones DeepSpeed's batch rule counts. The options as the common
# DeepSpeed programs spell them (FMEngine, DeepSpeedExamples, Megatron-DeepSpeed).
_SPLITS = re.compile(r"--(pipe|pipeline|pipeline[-_]model|model|tensor|tensor[-_]model|sequence|context)"
                     r"[-_]parallel[-_]size")


def data_parallel(command: tuple[str, ...] | list[str], world: int) -> tuple[int, str] | None:
    """(data-parallel ranks, words for them) of ``command`` on ``world`` ranks; None where
    its split of the model does not divide the world (DeepSpeed refuses that itself, in
    words of its own)."""
    split, named = 1, []
    for i, word in enumerate(command):
        key, eq, value = word.partition("=")
        if _SPLITS.fullmatch(key):
            value = value if eq else (command[i + 1] if i + 1 < len(command) else "")
            if value.isdigit() and int(value) > 1:
                split *= int(value)
                named.append(f"{key} {value}")
    if split == 1:
        return world, "ranks"
    if world % split:
        return None
    return world // split, f"data-parallel ranks ({world} ranks / {' x '.join(named)})"
