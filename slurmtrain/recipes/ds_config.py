"""The DeepSpeed config of a recipe: read, ``"auto"`` filled from the recipe, checked.

A recipe with ``train.engine = "deepspeed"`` names a ``ds_config.json`` (``deepspeed.config``:
a path, or the name of one shipped in ``configs/deepspeed/``) and/or gives keys inline
(``deepspeed.json``, a JSON object, and ``deepspeed.zero_stage``). As in the Hugging Face
integration, ``"auto"`` takes the recipe's value, and a number that contradicts the recipe
is refused naming both values and both files: the recipe stays the one place a run's
batch, schedule and precision are decided. Keys this module does not know go to DeepSpeed
unchanged (its own errors are reported by the engine, one line with the file's name).

Torch-free (the CLI checks recipes on a login node). The world size is only known in the
trainer, so ``gradient_accumulation_steps`` is checked there (:func:`resolve`).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..resources import configs_dir
from ..schema import Sources

INLINE = "deepspeed.json"  # where inline keys are reported as coming from


def shipped_dir() -> Path:
    return configs_dir() / "deepspeed"


def config_path(name: str, recipe_file: str) -> Path:
    """``name`` as a path (against the current directory, then the recipe's folder), else
    a config shipped in ``configs/deepspeed/`` (``zero2`` or ``zero2.json``)."""
    expanded = Path(os.path.expandvars(os.path.expanduser(name)))
    candidates = [expanded]
    if not expanded.is_absolute():
        candidates.append(Path(recipe_file).parent / expanded)
    stem = expanded.name[:-5] if expanded.name.endswith(".json") else expanded.name
    if os.sep not in name:
        candidates.append(shipped_dir() / f"{stem}.json")
    for c in candidates:
        if c.is_file():
            return c
    shipped = ", ".join(sorted(p.stem for p in shipped_dir().glob("*.json")))
    raise ConfigError(recipe_file, "deepspeed.config",
                      f"no such file {name!r}; shipped configs: {shipped}")


def _read_json(text: str, source: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ConfigError(source, "", f"not valid JSON: {err}") from None
    if not isinstance(data, dict):
        raise ConfigError(source, "", "expected a JSON object")
    return data


def _merge(base: dict, over: dict, where: dict, base_src: str, over_src: str, prefix: str = ""):
    """Deep-merge ``over`` into ``base``, recording in ``where`` which source gave each key."""
    for k, v in over.items():
        key = prefix + k
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            _merge(base[k], v, where, base_src, over_src, key + ".")
        else:
            base[k] = v
            where[key] = over_src


class DSConfig:
    """The merged JSON and where each of its keys came from (file or inline)."""

    def __init__(self, data: dict[str, Any], source: str, where: dict[str, str]):
        self.data, self.source, self._where = data, source, where

    def of(self, key: str) -> str:
        return self._where.get(key, self.source)

    def get(self, key: str, default: Any = None) -> Any:
        node: Any = self.data
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return node

    def zero_stage(self) -> int:
        stage = self.get("zero_optimization.stage", 0)
        if not isinstance(stage, int) or isinstance(stage, bool) or stage not in (0, 1, 2, 3):
            raise ConfigError(self.of("zero_optimization.stage"), "zero_optimization.stage",
                              f"expected 0, 1, 2 or 3, got {stage!r}")
        return stage


def load(recipe: Any, sources: Sources) -> DSConfig:
    """The recipe's DeepSpeed config, merged (file, then inline JSON, then zero_stage) and
    checked against the recipe (every number that the recipe also decides)."""
    ds = recipe.deepspeed
    recipe_file = sources.of("deepspeed.config") if ds.config else sources.default
    data: dict[str, Any] = {}
    where: dict[str, str] = {}
    source = sources.of("deepspeed.json") if ds.json else sources.default
    if ds.config:
        path = config_path(ds.config, recipe_file)
        source = str(path)
        try:
            text = path.read_text()
        except OSError as err:
            raise ConfigError(str(path), "", f"cannot read: {err.strerror}") from None
        data = _read_json(text, source)
    if ds.json:
        inline_src = f"{sources.of('deepspeed.json')} (deepspeed.json)"
        _merge(data, _read_json(ds.json, inline_src), where, source, inline_src)
    if ds.zero_stage is not None:
        data.setdefault("zero_optimization", {})["stage"] = ds.zero_stage
        where["zero_optimization.stage"] = f"{sources.of('deepspeed.zero_stage')} (deepspeed.zero_stage)"
    cfg = DSConfig(data, source, where)
    _check(cfg, recipe, sources)
    return cfg


def _recipe_values(recipe: Any) -> dict[str, tuple[Any, str]]:
    """DeepSpeed key -> (the recipe's value, the recipe key), for "auto" and for checks."""
    t = recipe.train
    return {
        "train_batch_size": (t.global_batch_size, "train.global_batch_size"),
        "train_micro_batch_size_per_gpu": (t.micro_batch_size, "train.micro_batch_size"),
        "gradient_clipping": (t.grad_clip, "train.grad_clip"),
        "optimizer.params.lr": (t.lr, "train.lr"),
        "optimizer.params.betas": ([t.beta1, t.beta2], "train.beta1/beta2"),
        "optimizer.params.eps": (1e-8, "the trainer's AdamW eps"),
        "optimizer.params.weight_decay": (t.weight_decay, "train.weight_decay"),
        "scheduler.params.warmup_max_lr": (t.lr, "train.lr"),
        "scheduler.params.warmup_min_lr": (0.0, "the trainer's warm-up start (0)"),
        "scheduler.params.warmup_num_steps": (t.warmup_steps, "train.warmup_steps"),
        "scheduler.params.total_num_steps": (t.steps, "train.steps"),
        "scheduler.params.cos_min_ratio": (t.min_lr / t.lr, "train.min_lr / train.lr"),
    }


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return a == b


def _contradiction(cfg: DSConfig, key: str, value: Any, want: Any, recipe_key: str,
                   sources: Sources) -> ConfigError:
    recipe_src = sources.of(recipe_key) if "." in recipe_key and "/" not in recipe_key \
        else sources.default
    return ConfigError(cfg.of(key), key, f"{value!r} contradicts {recipe_key} = {want!r} in "
                       f"{recipe_src}; set it to \"auto\" or change one of the two")


def _check(cfg: DSConfig, recipe: Any, sources: Sources) -> None:
    for key, (want, recipe_key) in _recipe_values(recipe).items():
        value = cfg.get(key)
        if value is None or value == "auto":
            continue
        if not _same(value, want):
            raise _contradiction(cfg, key, value, want, recipe_key, sources)
    opt = cfg.get("optimizer.type")
    if opt is not None and str(opt).lower() not in ("adam", "adamw"):
        raise ConfigError(cfg.of("optimizer.type"), "optimizer.type",
                          f"{opt!r}: the built-in trainer trains with AdamW (train.lr, "
                          "train.beta1/beta2, train.weight_decay); use \"AdamW\" or leave it out")
    dtype = recipe.train.dtype
    for prec, ok in (("fp16", ()), ("bf16", ("auto", "bfloat16"))):
        enabled = cfg.get(f"{prec}.enabled")
        if enabled is True and dtype not in ok:
            raise _contradiction(cfg, f"{prec}.enabled", True, dtype, "train.dtype", sources)
    if cfg.get("bf16.enabled") is False and dtype == "bfloat16":
        raise _contradiction(cfg, "bf16.enabled", False, dtype, "train.dtype", sources)
    stage = cfg.zero_stage()
    stages = recipe.pipeline.stages
    if stages > 1 and stage > 1:
        raise ConfigError(cfg.of("zero_optimization.stage"), "zero_optimization.stage",
                          f"{stage}: DeepSpeed's pipeline engine (pipeline.stages = {stages}) "
                          "supports ZeRO stage 0 or 1 only")
    offload = cfg.get("zero_optimization.offload_optimizer.device", "none")
    if offload not in ("none", None) and stage == 0:
        raise ConfigError(cfg.of("zero_optimization.offload_optimizer"),
                          "zero_optimization.offload_optimizer",
                          "optimizer offload needs ZeRO stage 1, 2 or 3")


def resolve(cfg: DSConfig, recipe: Any, sources: Sources, accum: int, bf16: bool) -> dict:
    """The config to hand DeepSpeed: every "auto" filled, gradient accumulation (which
    needs the world size) checked. The optimizer and scheduler sections are dropped: they
    were checked against the recipe, and the trainer passes its own AdamW and warm-up +
    cosine schedule, so that both engines train the same way (and no C++ optimizer op is
    built)."""
    out = json.loads(json.dumps(cfg.data))
    values = {k: v for k, (v, _) in _recipe_values(recipe).items() if "." not in k}
    values["gradient_accumulation_steps"] = accum
    gas = cfg.get("gradient_accumulation_steps")
    if gas not in (None, "auto") and not _same(gas, accum):
        raise ConfigError(cfg.of("gradient_accumulation_steps"), "gradient_accumulation_steps",
                          f"{gas!r} contradicts the recipe's {accum} (train.global_batch_size / "
                          f"(train.micro_batch_size x data-parallel ranks)) in {sources.default}")
    out.update(values)
    out.pop("optimizer", None)
    out.pop("scheduler", None)
    out["bf16"] = {**(out.get("bf16") or {}), "enabled": bf16}
    out["fp16"] = {**(out.get("fp16") or {}), "enabled": False}
    return _no_auto(out, cfg.source)


def _no_auto(node: Any, source: str, key: str = "") -> Any:
    """An "auto" left where the recipe has no value: DeepSpeed would fail on it later
    with a type error; say which key instead."""
    if isinstance(node, dict):
        return {k: _no_auto(v, source, f"{key}.{k}" if key else k) for k, v in node.items()}
    if node == "auto":
        raise ConfigError(source, key, '"auto" is not supported for this key (the recipe '
                          "has no value for it); give a value")
    return node
