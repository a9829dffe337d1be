"""Hugging Face Llama checkpoints: read them into our model, write ours for ``transformers``.

A checkpoint is a folder as ``LlamaForCausalLM.save_pretrained`` writes it: ``config.json``
and the weights in ``model.safetensors``, or in ``model-0000i-of-0000n.safetensors`` shards
listed by ``model.safetensors.index.json``. Our model uses HF's rotary layout, so names
map one to one and no tensor is permuted (see :data:`LAYER_NAMES`).

Every problem with a checkpoint a user points at is a ConfigError naming the file, the
tensor or key, and what was expected.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Iterator, Mapping

import torch

from ..errors import ConfigError
from ..recipes.presets import ModelArgs

CONFIG = "config.json"
SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
_SHARD_RE = re.compile(r"model-\d{5}-of-\d{5}\.safetensors")

# Our name inside ``layers.N.`` -> HF's inside ``model.layers.N.``, in HF's module order
# (which is the order shapes are checked in, so the first mismatch reported is stable).
LAYER_NAMES: dict[str, str] = {
    "attention.wq.weight": "self_attn.q_proj.weight",
    "attention.wk.weight": "self_attn.k_proj.weight",
    "attention.wv.weight": "self_attn.v_proj.weight",
    "attention.wo.weight": "self_attn.o_proj.weight",
    "feed_forward.w1.weight": "mlp.gate_proj.weight",
    "feed_forward.w3.weight": "mlp.up_proj.weight",
    "feed_forward.w2.weight": "mlp.down_proj.weight",
    "attention_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
}
# Wrappers that prefix parameter names: torch.compile and activation checkpointing.
_WRAPPER_PARTS = ("_orig_mod.", "_checkpoint_wrapped_module.")


def expected_tensors(args: ModelArgs) -> list[tuple[str, str, tuple[int, ...]]]:
    """(our name, HF name, shape) of every weight of ``Transformer(args)``, in HF order.

    With tied embeddings the output projection is listed too (as ``lm_head.weight``);
    HF omits it from tied checkpoints.
    """
    d, hd, f = args.dim, args.head_dim, args.ffn_dim
    shapes = {
        "attention.wq.weight": (args.n_heads * hd, d),
        "attention.wk.weight": (args.n_kv_heads * hd, d),
        "attention.wv.weight": (args.n_kv_heads * hd, d),
        "attention.wo.weight": (d, args.n_heads * hd),
        "feed_forward.w1.weight": (f, d),
        "feed_forward.w3.weight": (f, d),
        "feed_forward.w2.weight": (d, f),
        "attention_norm.weight": (d,),
        "ffn_norm.weight": (d,),
    }
    rows = [("tok_embeddings.weight", "model.embed_tokens.weight", (args.vocab_size, d))]
    for i in range(args.n_layers):
        rows += [(f"layers.{i}.{ours}", f"model.layers.{i}.{theirs}", shapes[ours])
                 for ours, theirs in LAYER_NAMES.items()]
    rows.append(("norm.weight", "model.norm.weight", (d,)))
    rows.append(("output.weight", "lm_head.weight", (args.vocab_size, d)))
    return rows


# ---------------------------------------------------------------- config.json

def hf_config_to_args(config: Mapping[str, Any] | str | os.PathLike) -> ModelArgs:
    """ModelArgs from a Llama ``config.json`` (its path, its folder, or the parsed dict).

    Accepts what transformers 4.x and 5.x write (``rope_theta`` at the top or inside
    ``rope_parameters``). Refuses what our model cannot reproduce: other architectures,
    biases, rope scaling, an explicit head_dim other than hidden_size / heads.
    """
    source = "config.json"
    if not isinstance(config, Mapping):
        path = Path(config) / CONFIG if Path(config).is_dir() else Path(config)
        source = str(path)
        try:
            config = json.loads(path.read_text())
        except FileNotFoundError:
            raise ConfigError(source, "", "no such file; a Hugging Face checkpoint folder "
                              "has a config.json next to its weights") from None
        except (OSError, ValueError) as err:
            raise ConfigError(source, "", f"cannot read it as JSON: {err}") from None

    def refuse(key: str, message: str) -> ConfigError:
        return ConfigError(source, key, message)

    model_type = config.get("model_type", "llama")
    if model_type != "llama":
        raise refuse("model_type", f"expected \"llama\", got {model_type!r}")
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                "vocab_size"):
        if not isinstance(config.get(key), int):
            raise refuse(key, f"required integer is missing (got {config.get(key)!r})")
    if config.get("hidden_act", "silu") != "silu":
        raise refuse("hidden_act", f"only \"silu\" is supported, got {config['hidden_act']!r}")
    for key in ("attention_bias", "mlp_bias"):
        if config.get(key):
            raise refuse(key, "biases are not supported by slurmtrain's Llama model")
    heads = config["num_attention_heads"]
    head_dim = config.get("head_dim")
    if head_dim is not None and head_dim * heads != config["hidden_size"]:
        raise refuse("head_dim", f"{head_dim} * {heads} heads != hidden_size "
                     f"{config['hidden_size']}; only head_dim = hidden_size / heads is supported")

    rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type != "default":
        raise refuse("rope_parameters" if "rope_parameters" in config else "rope_scaling",
                     f"rope type {rope_type!r} is not supported (only plain rotary embeddings)")
    theta = rope.get("rope_theta", config.get("rope_theta", 10000.0))

    try:
        return ModelArgs(
            dim=config["hidden_size"], n_layers=config["num_hidden_layers"], n_heads=heads,
            n_kv_heads=config.get("num_key_value_heads") or heads,
            vocab_size=config["vocab_size"], ffn_dim=config["intermediate_size"],
            norm_eps=float(config.get("rms_norm_eps", 1e-6)), rope_theta=float(theta),
            max_seq_len=int(config.get("max_position_embeddings", 2048)),
            tie_embeddings=bool(config.get("tie_word_embeddings", False)))
    except ConfigError as err:
        raise refuse("", f"does not describe a usable model: {err.key}: {err.message}") from None


def args_to_hf_config(args: ModelArgs, extra: Mapping[str, Any] | None = None) -> dict:
    """The ``config.json`` dict for ``args`` (readable by transformers 4.45+ and 5.x).

    ``extra`` adds or replaces keys, e.g. the tokenizer's ``bos_token_id``/``eos_token_id``.
    """
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": args.dim,
        "intermediate_size": args.ffn_dim,
        "num_hidden_layers": args.n_layers,
        "num_attention_heads": args.n_heads,
        "num_key_value_heads": args.n_kv_heads,
        "head_dim": args.head_dim,
        "vocab_size": args.vocab_size,
        "hidden_act": "silu",
        "rms_norm_eps": args.norm_eps,
        "max_position_embeddings": args.max_seq_len,
        "rope_theta": args.rope_theta,  # transformers 4.x reads this one,
        "rope_parameters": {"rope_type": "default", "rope_theta": args.rope_theta},  # 5.x this
        "tie_word_embeddings": args.tie_embeddings,
        "attention_bias": False,
        "mlp_bias": False,
        "initializer_range": args.init_std,
    }
    config.update(extra or {})
    return config


# ---------------------------------------------------------------- reading

def _locate(ckpt_dir: Path) -> dict[str, Path]:
    """HF tensor name -> the safetensors file that holds it, from the index or one file."""
    from safetensors import safe_open

    index, single = ckpt_dir / INDEX_FILE, ckpt_dir / SINGLE_FILE
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise ConfigError(str(index), "weight_map", f"unreadable index: {err}") from None
        files = {name: ckpt_dir / file for name, file in weight_map.items()}
        for path in sorted(set(files.values())):
            if not path.is_file():
                raise ConfigError(str(index), "weight_map",
                                  f"lists {path.name}, which is missing from {ckpt_dir}")
        return files
    if single.is_file():
        with safe_open(single, framework="pt") as f:
            return {name: single for name in f.keys()}
    other = [p.name for p in ckpt_dir.iterdir() if p.suffix in (".bin", ".pt", ".pth")]
    hint = (f" (found {', '.join(sorted(other))}: only safetensors checkpoints are read)"
            if other else "")
    raise ConfigError(str(ckpt_dir), "", f"no {SINGLE_FILE} or {INDEX_FILE}{hint}")


def _shapes(files: dict[str, Path]) -> dict[str, tuple[int, ...]]:
    """Tensor shapes from the safetensors headers, without reading any data."""
    from safetensors import safe_open

    shapes = {}
    for path in sorted(set(files.values())):
        try:
            with safe_open(path, framework="pt") as f:
                for name in f.keys():
                    shapes[name] = tuple(f.get_slice(name).get_shape())
        except Exception as err:  # safetensors raises its own types for corrupt headers
            raise ConfigError(str(path), "", f"not a readable safetensors file: {err}") from None
    return shapes


def _plan(ckpt_dir: Path, args: ModelArgs, model_name: str) -> tuple[list[tuple[str, str, Path]],
                                                                     ModelArgs]:
    """Check a checkpoint against ``args``; return (our name, HF name, file) to read, and
    the checkpoint's own ModelArgs. Nothing but headers and config.json is read."""
    if not ckpt_dir.is_dir():
        raise ConfigError(str(ckpt_dir), "", "no such directory (expected a Hugging Face "
                          "checkpoint folder with config.json and model.safetensors)")
    ckpt_args = hf_config_to_args(ckpt_dir / CONFIG)
    files = _locate(ckpt_dir)
    shapes = _shapes(files)
    plan = []
    for ours, theirs, shape in expected_tensors(args):
        source = theirs
        if theirs == "lm_head.weight" and theirs not in files:
            # A tied checkpoint has no lm_head: the output projection is the embedding
            # (also the way to start an untied model from a tied one).
            source = "model.embed_tokens.weight"
        if source not in files:
            index = ckpt_dir / INDEX_FILE
            where = index if index.is_file() else ckpt_dir / SINGLE_FILE
            raise ConfigError(str(where), theirs, f"tensor missing from the checkpoint "
                              f"(expected shape {list(shape)} for {model_name})")
        found = shapes.get(source)
        if found != shape:
            raise ConfigError(str(files[source]), source, f"expected shape {list(shape)} "
                              f"for {model_name}, found {list(found) if found else 'nothing'}")
        plan.append((ours, source, files[source]))
    if args.tie_embeddings and "lm_head.weight" in files and not ckpt_args.tie_embeddings:
        raise ConfigError(str(ckpt_dir / CONFIG), "tie_word_embeddings",
                          f"the checkpoint has its own lm_head but {model_name} ties it to the "
                          "embedding; set model.tie_embeddings = false")
    for ours, theirs in (("rope_theta", "rope_theta"), ("norm_eps", "rms_norm_eps")):
        has, wants = getattr(ckpt_args, ours), getattr(args, ours)
        if has != wants:
            raise ConfigError(str(ckpt_dir / CONFIG), theirs, f"checkpoint has {has}, "
                              f"{model_name} has {wants}; set model.{ours} = {has}")
    return plan, ckpt_args


def _read(plan: list[tuple[str, str, Path]]) -> Iterator[tuple[str, torch.Tensor]]:
    from safetensors import safe_open

    by_file: dict[Path, list[tuple[str, str]]] = {}
    for ours, theirs, path in plan:
        by_file.setdefault(path, []).append((ours, theirs))
    for path, names in by_file.items():
        with safe_open(path, framework="pt", device="cpu") as f:
            for ours, theirs in names:
                yield ours, f.get_tensor(theirs)


def read_hf_state_dict(ckpt_dir: str | os.PathLike, args: ModelArgs, *,
                       model_name: str = "the model") -> dict[str, torch.Tensor]:
    """A full state dict of ``Transformer(args)`` (our names, checkpoint dtype, CPU),
    checked against ``args`` first. For a sharded model, hand it to
    ``torch.distributed.checkpoint.state_dict.set_model_state_dict`` with
    ``full_state_dict=True``. Tied models get ``output.weight`` as the same tensor."""
    plan, _ = _plan(Path(ckpt_dir), args, model_name)
    state = dict(_read(plan))
    if args.tie_embeddings:
        state["output.weight"] = state["tok_embeddings.weight"]
    return state


@torch.no_grad()
def load_hf_checkpoint(model: torch.nn.Module, ckpt_dir: str | os.PathLike, *,
                       model_name: str = "the model") -> ModelArgs:
    """Copy a HF checkpoint's weights into an unsharded :class:`Transformer`, in place.

    Shapes (all of them, from file headers) and rope_theta/norm_eps are checked before
    anything is copied, so a refused checkpoint leaves ``model`` untouched. Tensors are
    read one at a time and cast to each parameter's dtype and device. ``model_name``
    names the model in errors ("preset tiny"). Returns the checkpoint's ModelArgs.
    """
    args: ModelArgs = model.args
    plan, ckpt_args = _plan(Path(ckpt_dir), args, model_name)
    params = dict(model.named_parameters(remove_duplicate=False))
    for ours, tensor in _read(plan):
        if args.tie_embeddings and ours == "output.weight":
            continue  # the same Parameter as tok_embeddings.weight
        param = params[ours]
        if hasattr(param, "device_mesh"):
            raise TypeError("load_hf_checkpoint needs an unsharded model; for FSDP use "
                            "read_hf_state_dict with set_model_state_dict(full_state_dict=True)")
        param.copy_(tensor)
    return ckpt_args


# ---------------------------------------------------------------- writing

def _clean(name: str) -> str:
    for part in _WRAPPER_PARTS:
        name = name.replace(part, "")
    return name


def _hf_tensors(state_dict: Mapping[str, torch.Tensor], args: ModelArgs,
                dtype: torch.dtype | None) -> dict[str, torch.Tensor]:
    """HF's names and CPU tensors for ``state_dict``, every tensor checked against the model."""
    state = {_clean(k): v for k, v in state_dict.items()}
    tensors: dict[str, torch.Tensor] = {}
    for ours, theirs, shape in expected_tensors(args):
        if theirs == "lm_head.weight" and args.tie_embeddings:
            continue  # HF writes tied checkpoints without lm_head
        if ours not in state:
            raise ConfigError("state dict", ours, f"missing (expected shape {list(shape)})")
        tensor = state[ours].detach()
        if tuple(tensor.shape) != shape:
            raise ConfigError("state dict", ours, f"expected shape {list(shape)} for the model "
                              f"being exported, found {list(tensor.shape)}")
        if dtype is not None and tensor.is_floating_point():
            tensor = tensor.to(dtype)
        tensors[theirs] = tensor.to("cpu").contiguous().clone()
    return tensors


def _shards(tensors: dict[str, torch.Tensor], max_bytes: int) -> list[dict[str, torch.Tensor]]:
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, tensor in tensors.items():
        nbytes = tensor.numel() * tensor.element_size()
        if shards[-1] and size + nbytes > max_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = tensor
        size += nbytes
    return shards


def _write_weights(shards: list[dict[str, torch.Tensor]], out: Path) -> list[Path]:
    """One ``model.safetensors``, or numbered shards and their index."""
    from safetensors.torch import save_file as save_private

    def save_file(tensors, path: Path, metadata: dict) -> None:
        save_private(tensors, path, metadata=metadata)
        # safetensors writes its files for the owner alone: teammates on a shared file
        # system read them as they read config.json, by the user's umask.
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(path, 0o666 & ~mask)

    metadata = {"format": "pt"}  # transformers refuses safetensors files without it
    if len(shards) == 1:
        save_file(shards[0], out / SINGLE_FILE, metadata=metadata)
        return [out / SINGLE_FILE]
    written, weight_map, total = [], {}, 0
    for i, shard in enumerate(shards, 1):
        file = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, out / file, metadata=metadata)
        written.append(out / file)
        for name, tensor in shard.items():
            weight_map[name] = file
            total += tensor.numel() * tensor.element_size()
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out / INDEX_FILE).write_text(json.dumps(index, indent=2) + "\n")
    return written + [out / INDEX_FILE]


def export_hf(state_dict: Mapping[str, torch.Tensor], args: ModelArgs,
              out_dir: str | os.PathLike, *, dtype: torch.dtype | None = None,
              max_shard_bytes: int = 5 * 2**30,
              extra_config: Mapping[str, Any] | None = None) -> list[Path]:
    """Write ``state_dict`` (ours, full, any device) as a HF Llama checkpoint in ``out_dir``.

    Writes ``config.json`` and ``model.safetensors``, or numbered shards of at most
    ``max_shard_bytes`` plus ``model.safetensors.index.json``. Earlier weight files of
    those names in ``out_dir`` are removed first so no stale shard is left. ``dtype``
    casts floating tensors (default: keep). Returns the files written.
    """
    tensors = _hf_tensors(state_dict, args, dtype)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.iterdir():
        if old.name in (SINGLE_FILE, INDEX_FILE) or _SHARD_RE.fullmatch(old.name):
            old.unlink()
    written = _write_weights(_shards(tensors, max_shard_bytes), out)
    config = args_to_hf_config(args, extra_config)
    first = next(iter(tensors.values()))
    config.setdefault("torch_dtype", str(first.dtype).removeprefix("torch."))
    (out / CONFIG).write_text(json.dumps(config, indent=2) + "\n")
    return written + [out / CONFIG]
