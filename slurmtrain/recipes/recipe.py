"""Training recipes: typed, frozen dataclasses loaded from ``configs/recipes/*.toml``.

A recipe names a model preset (with optional overrides), the data, and the training
schedule. It is loaded through the project's generic loader (``slurmtrain.schema``), so an
unknown key or a wrong type is a ``ConfigError`` naming the file and the dotted key.
This module imports no torch: the CLI may read recipes on a login node.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Sequence

from .._toml import tomllib
from ..errors import ConfigError
from ..resources import recipes_dir
from ..schema import Sources, apply_set, build, field, matches, merge, non_negative, parse_set, positive

DEMO_CORPUS = "demo/corpus.jsonl"  # where ``slurmtrain demo-corpus`` writes by default


def _fraction(value: float) -> str | None:
    return None if 0.0 <= value < 0.5 else f"expected a fraction in [0, 0.5), got {value!r}"


@dataclass(frozen=True)
class ModelSection:
    preset: str = field("model preset (``slurmtrain models`` lists them)")
    dim: int | None = field("override: hidden size", None, check=positive)
    n_layers: int | None = field("override: number of transformer blocks", None, check=positive)
    n_heads: int | None = field("override: attention heads", None, check=positive)
    n_kv_heads: int | None = field("override: key/value heads (grouped-query attention)", None,
                                   check=positive)
    vocab_size: int | None = field("override: vocabulary size", None, check=positive)
    ffn_dim: int | None = field("override: feed-forward hidden size", None, check=positive)
    norm_eps: float | None = field("override: RMSNorm epsilon", None, check=positive)
    rope_theta: float | None = field("override: RoPE base", None, check=positive)
    max_seq_len: int | None = field("override: longest sequence the model supports", None,
                                    check=positive)
    tie_embeddings: bool | None = field("override: share input and output embeddings", None)


@dataclass(frozen=True)
class DataSection:
    path: str = field("jsonl file with a `text` field, or a folder of .jsonl/.txt files; "
                      "relative paths are resolved against the current directory", DEMO_CORPUS,
                      check=matches(r".*\S.*", "a corpus file or folder"))  # "" would be the whole current directory
    tokenizer: str | None = field("tokenizer.json (or a folder holding one); none: byte-level", None)
    max_seq_len: int = field("tokens per training sequence", 512, check=positive)
    val_fraction: float = field("share of packed sequences held out for evaluation", 0.01,
                                check=_fraction)
    seed: int = field("seed of the validation split and of the per-epoch shuffle", 0)


@dataclass(frozen=True)
class TrainSection:
    steps: int = field("optimizer steps in the whole run (the schedule's length)", check=positive)
    global_batch_size: int = field("sequences per optimizer step, over all ranks", check=positive)
    micro_batch_size: int = field("sequences per forward/backward on one rank", 1, check=positive)
    lr: float = field("peak learning rate", 3e-4, check=positive)
    warmup_steps: int = field("linear warm-up steps", 0, check=non_negative)
    min_lr: float = field("learning rate at the end of the cosine decay", 0.0, check=non_negative)
    weight_decay: float = field("AdamW weight decay", 0.1, check=non_negative)
    beta1: float = field("AdamW beta1", 0.9, check=positive)
    beta2: float = field("AdamW beta2", 0.95, check=positive)
    grad_clip: float = field("clip the global gradient norm to this (0: no clipping)", 1.0,
                             check=non_negative)
    seed: int = field("seed of the weight initialisation", 0)
    dtype: Literal["auto", "bfloat16", "float32"] = field(
        "compute dtype: auto is bfloat16 on GPUs and float32 on CPU", "auto")
    activation_checkpointing: bool = field("recompute each block's activations in backward", False)
    compile: bool = field("torch.compile each block", False)
    log_steps: int = field("log (and write metrics.jsonl) every this many steps", 10, check=positive)
    eval_steps: int = field("evaluate on the held-out slice every this many steps (0: never)", 0,
                            check=non_negative)
    eval_batches: int = field("micro-batches per rank in one evaluation", 8, check=positive)
    save_steps: int = field("save a checkpoint every this many steps (0: only at the end)", 0,
                            check=non_negative)
    keep_last: int = field("complete checkpoints to keep", 2, check=positive)
    checkpoint_dir: str = field("where the checkpoints go, when not in the run directory (a scratch file "
                                "system; $VARIABLES and ~ are the node's): <checkpoint_dir>/<run name>, "
                                "linked from the run directory's checkpoints, where resume, status and "
                                "export find them (empty: in the run directory)", "")
    async_save: bool = field("save checkpoints in the background (dcp.async_save): training "
                             "waits only while a copy of the state is taken (fsdp2 and the torch "
                             "pipeline; DeepSpeed saves in the foreground)", True)
    memory_steps: int = field("also keep the state in node memory (and a copy on the next node) every this "
                              "many steps: an in-job restart loads the newest such copy, a requeue the "
                              "durable checkpoint (0: never; fsdp2 and the torch pipeline)", 0,
                              check=non_negative)
    engine: Literal["fsdp2", "deepspeed"] = field(
        "training engine: fsdp2 (torch FSDP2 / pipelining) or deepspeed (ZeRO via the "
        "[deepspeed] section)", "fsdp2")


SCHEDULES = ("gpipe", "1f1b", "interleaved-1f1b")  # pipeline schedules, as recipes name them


@dataclass(frozen=True)
class PipelineSection:
    stages: int = field("pipeline ranks the blocks are split over (1: no pipeline); "
                        "data-parallel ranks = world size / stages", 1, check=positive)
    schedule: Literal["gpipe", "1f1b", "interleaved-1f1b"] = field(
        "pipeline schedule (interleaved-1f1b needs stages_per_rank >= 2)", "1f1b")
    stages_per_rank: int = field("model chunks per pipeline rank (interleaved-1f1b: 2 or more; "
                                 "else 1)", 1, check=positive)
    microbatches: int = field("micro-batches per step on each pipeline (0: global_batch_size / "
                              "(micro_batch_size x data-parallel ranks))", 0, check=non_negative)


@dataclass(frozen=True)
class DeepSpeedSection:
    config: str | None = field("ds_config.json for train.engine = \"deepspeed\": a path "
                               "(against the current directory, then the recipe's folder) or "
                               "a shipped name (zero1, zero2, zero3, zero3-offload, pipeline)",
                               None)
    json: str | None = field("inline DeepSpeed keys, a JSON object merged over the file", None)
    zero_stage: int | None = field("ZeRO stage (0-3), over the file's", None,
                                   check=non_negative)


@dataclass(frozen=True)
class DebugSection:
    fail_at_step: int | None = field("raise a RuntimeError when this step begins", None,
                                     check=positive)
    stop_at_step: int | None = field("act as if a stop signal arrived after this step (0: "
                                     "before the first one, saving the initial weights as "
                                     "checkpoint step_0)", None, check=non_negative)
    kill_in_save_at_step: int | None = field(
        "SIGKILL rank 0 while saving this step, after the shards, before the marker", None,
        check=positive)
    slow_save_at_step: int | None = field(
        "the background save of this step takes 15 s longer to be complete (a slow file "
        "system; train.async_save only)", None, check=positive)
    step_seconds: float | None = field(
        "each step lasts at least this long, the rest asleep: a larger model's pace at a "
        "fraction of the CPU (tests that inject faults between steps)", None, check=positive)


@dataclass(frozen=True)
class Recipe:
    model: ModelSection = field("the model: a preset and optional overrides")
    train: TrainSection = field("optimisation and schedule")
    data: DataSection = field("corpus, tokenizer and packing", factory=DataSection)
    pipeline: PipelineSection = field("pipeline parallelism (torch.distributed.pipelining)",
                                      factory=PipelineSection)
    deepspeed: DeepSpeedSection = field("DeepSpeed config (train.engine = \"deepspeed\")",
                                        factory=DeepSpeedSection)
    debug: DebugSection = field("test hooks; leave empty in real runs", factory=DebugSection)
    description: str = field("one line saying what this recipe is for", "")


def builtin_recipes() -> list[str]:
    return sorted(p.stem for p in recipes_dir().glob("*.toml"))


def recipe_path(name_or_path: str) -> Path:
    """A recipe name (``tiny-demo``) from the built-ins, or a path to a TOML file."""
    candidate = Path(name_or_path).expanduser()
    if candidate.suffix == ".toml" or os.sep in name_or_path or candidate.is_file():
        if not candidate.is_file():
            raise ConfigError(name_or_path, "", "no such recipe file")
        return candidate
    path = recipes_dir() / f"{name_or_path}.toml"
    if not path.is_file():
        names = builtin_recipes()
        close = difflib.get_close_matches(name_or_path, names, n=1, cutoff=0.6)
        hint = f' (did you mean "{close[0]}"?)' if close else ""
        raise ConfigError("--recipe", "", f"no recipe named {name_or_path!r}{hint}; built-in "
                          f"recipes: {', '.join(names)}; or give a path to a .toml file")
    return path


def load_recipe(name_or_path: str, sets: Sequence[tuple[str, Any, str]] = ()) -> Recipe:
    """Load and check a recipe. ``sets`` holds (dotted key, value, origin) triples
    (``--set``, ``--train-steps``...), applied on top of the file."""
    return load_recipe_sources(name_or_path, sets)[0]


def load_recipe_sources(name_or_path: str, sets: Sequence[tuple[str, Any, str]] = ()
                        ) -> tuple[Recipe, Sources]:
    """:func:`load_recipe`, also returning where each key came from (for later messages)."""
    path = recipe_path(name_or_path)
    sources = Sources(str(path))
    data = _recipe_data(path, sources, [])
    for key, value, origin in sets:
        apply_set(data, key, value, sources, origin)
    try:
        recipe = build(Recipe, data, sources)
    except ConfigError as err:
        raise _with_profile_pointer(err) from None
    _check_preset(recipe, sources)
    _check_engine(recipe, sources)
    _check_schedule(recipe, sources)
    return recipe, sources


def _with_profile_pointer(err: ConfigError) -> ConfigError:
    """An unknown recipe key that is a cluster profile's (``[train] checkpoint_every``,
    a ``[resilience]`` table): the error says where it belongs."""
    from ..profile import Profile
    name = err.key.rsplit(".", 1)[-1]
    if not err.message.startswith("unknown key") or not name:
        return err
    if "." not in err.key and name in {f.name for f in dataclasses.fields(Profile)}:
        where = f"[{name}] is a section of the cluster profile, not of a recipe"
    else:
        owner = next((s for s, cls in typing.get_type_hints(Profile).items() if dataclasses.is_dataclass(cls)
                      and name in {f.name for f in dataclasses.fields(cls)}), None)
        if owner is None:
            return err
        where = (f"{name} is a cluster profile's key ({owner}.{name}): put it in the profile, or give it to "
                 f"gen/submit as --set {owner}.{name}=VALUE")
    # A near recipe key ("did you mean checkpoint_dir?") is no answer to a key of the profile.
    return ConfigError(err.source, err.key, f"{err.message.split(';')[0].split(' (did you mean')[0]}; {where}")


def notes(recipe: Recipe, sources: Sources) -> list[str]:
    """What in a valid recipe will not train as its author likely meant: warned, never
    refused (a trial with ``--set train.steps=20`` keeps its recipe's warm-up)."""
    t, said = recipe.train, []
    if t.warmup_steps >= t.steps:
        said.append(f"train.warmup_steps = {t.warmup_steps} ({sources.of('train.warmup_steps')}) is not below "
                    f"train.steps = {t.steps} ({sources.of('train.steps')}): the learning rate rises for the whole "
                    f"run, to {t.steps / t.warmup_steps:.0%} of train.lr = {t.lr:g} at its last step, and never "
                    "decays")
    return said + _memory_notes(t, sources)


def _memory_notes(t: Any, sources: Sources) -> list[str]:
    """train.memory_steps that makes no copy: none comes before the last step, or each falls on
    a durable save's step, which takes its place (with the recipe's cadence, the default;
    resilience.checkpoint_every = "auto" takes K as its first interval only)."""
    k, where = t.memory_steps, f"train.memory_steps = {t.memory_steps} ({sources.of('train.memory_steps')})"
    if not k:
        return []
    if k >= t.steps:
        return [f"{where} is not below train.steps = {t.steps}: no copy in node memory is made before the run ends"]
    if t.save_steps and k % t.save_steps == 0:
        return [f"{where} is a multiple of train.save_steps = {t.save_steps} ({sources.of('train.save_steps')}): "
                "each copy would fall on a durable save's step, which takes its place, so no copy in node memory "
                f"is ever made; give it a value below {t.save_steps}"]
    return []


def _recipe_data(path: Path, sources: Sources, chain: list[Path]) -> dict[str, Any]:
    """The recipe's data with its ``extends`` chain merged in, parents first: a built-in
    recipe's name, or a file's path from the directory of the file that says it."""
    if path.resolve() in [p.resolve() for p in chain]:
        raise ConfigError(str(path), "extends", f"extends cycle: {' -> '.join(str(p) for p in chain + [path])}")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(str(path), "", f"not valid TOML: {err}") from None
    parent = data.pop("extends", None)
    base: dict[str, Any] = {}
    if parent is not None:
        if not isinstance(parent, str) or not parent:
            raise ConfigError(str(path), "extends", f"expected a recipe name or path, got {parent!r}")
        ref = str(path.parent / parent) if ("/" in parent or parent.endswith(".toml")) else parent
        try:
            found = recipe_path(ref)
        except ConfigError as err:  # the file that says `extends` is where to look
            raise ConfigError(str(path), "extends", err.message) from None
        base = _recipe_data(found, sources, chain + [path])
    sources.record(data, str(path))
    return merge(base, data)


def extends(name_or_path: str) -> bool:
    """Whether the recipe file names another it builds on (its text alone is not all of it)."""
    try:
        return "extends" in tomllib.loads(recipe_path(name_or_path).read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return False


def parse_sets(assignments: Sequence[str]) -> list[tuple[str, Any, str]]:
    out = []
    for a in assignments:
        key, value = parse_set(a)
        out.append((key, value, f"--set {a}"))
    return out


def _check_preset(recipe: Recipe, sources: Sources) -> None:
    from .presets import PRESETS
    if recipe.model.preset not in PRESETS:
        names = sorted(PRESETS)
        close = difflib.get_close_matches(recipe.model.preset, names, n=1, cutoff=0.6)
        hint = f' (did you mean "{close[0]}"?)' if close else ""
        raise ConfigError(sources.of("model.preset"), "model.preset",
                          f"unknown preset {recipe.model.preset!r}{hint}; presets: {', '.join(names)}")
    args = model_args(recipe, sources)
    if recipe.data.max_seq_len > args.max_seq_len:
        raise ConfigError(sources.of("data.max_seq_len"), "data.max_seq_len",
                          f"{recipe.data.max_seq_len} is longer than the model's max_seq_len "
                          f"{args.max_seq_len}; lower it or set model.max_seq_len")
    _check_pipeline_model(recipe.pipeline, args, sources)


def _check_schedule(recipe: Recipe, sources: Sources) -> None:
    """The cosine decays from lr down to min_lr: a min_lr above lr would climb instead."""
    t = recipe.train
    if t.min_lr > t.lr:
        raise ConfigError(sources.of_rule("train.min_lr", "train.lr"), "train.min_lr",
                          f"{t.min_lr:g} is above train.lr {t.lr:g}: the schedule decays from lr to min_lr")


def _check_engine(recipe: Recipe, sources: Sources) -> None:
    # The [deepspeed] section is read only with that engine: one key switches engines.
    if recipe.train.engine != "deepspeed":
        return
    if recipe.train.memory_steps:  # before the queue: the trainer refuses it at its start too
        raise ConfigError(sources.of_rule("train.memory_steps", "train.engine"), "train.memory_steps",
                          f"{recipe.train.memory_steps} needs the fsdp2 engine (or the torch pipeline): deepspeed "
                          "keeps its own state; set it to 0")
    from .ds_config import load
    load(recipe, sources)


def _check_pipeline_model(pp: PipelineSection, args, sources: Sources) -> None:
    """What a pipeline asks of the model and the schedule (the world size is checked by
    :func:`.inputs.check_pipeline`, where it is known)."""
    interleaved = pp.schedule == "interleaved-1f1b"
    if pp.stages_per_rank > 1 and pp.stages == 1:
        raise ConfigError(sources.of("pipeline.stages_per_rank"), "pipeline.stages_per_rank",
                          f"{pp.stages_per_rank} model chunks per rank need pipeline.stages > 1")
    if pp.stages > 1 and interleaved and pp.stages_per_rank < 2:
        raise ConfigError(sources.of("pipeline.stages_per_rank"), "pipeline.stages_per_rank",
                          f"{pp.stages_per_rank}: schedule interleaved-1f1b needs 2 or more "
                          "model chunks per rank")
    if pp.stages_per_rank > 1 and not interleaved:
        raise ConfigError(sources.of("pipeline.stages_per_rank"), "pipeline.stages_per_rank",
                          f"{pp.stages_per_rank}: only schedule interleaved-1f1b runs several "
                          f"model chunks per rank (pipeline.schedule = {pp.schedule!r})")
    chunks = pp.stages * pp.stages_per_rank
    if chunks > args.n_layers:
        key = "pipeline.stages"
        raise ConfigError(sources.of(key), key,
                          f"{pp.stages} stages x {pp.stages_per_rank} per rank = {chunks} model "
                          f"chunks, but the model has {args.n_layers} blocks (model.n_layers)")
    if chunks > 1 and args.tie_embeddings:
        raise ConfigError(sources.of("pipeline.stages"), "pipeline.stages",
                          "not supported yet: a pipeline with model.tie_embeddings = true (the "
                          "first and last stage would share the embedding matrix)")


def model_args(recipe: Recipe, sources: Sources | None = None):
    """The preset's ``ModelArgs`` with the recipe's overrides applied (and checked)."""
    from .presets import get_preset, override
    changes = {f.name: getattr(recipe.model, f.name) for f in dataclasses.fields(ModelSection)
               if f.name != "preset" and getattr(recipe.model, f.name) is not None}
    return override(get_preset(recipe.model.preset), changes, sources, prefix="model.")


def recipe_to_dict(recipe: Recipe) -> dict[str, Any]:
    """Plain dict for the checkpoint's metadata (None values left out, as in TOML)."""
    def clean(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items() if x is not None}
        return v
    return clean(dataclasses.asdict(recipe))


def resolve_data_path(path: str) -> Path:
    """``~`` and ``$VARS`` expanded; relative paths against the current directory."""
    return Path(os.path.expandvars(os.path.expanduser(path))).resolve()
