"""Commands for the built-in trainer: models (list presets), demo-corpus (data for
tiny-demo), export (a run's checkpoint -> Hugging Face).

``models`` reads only :mod:`slurmtrain.recipes.presets`, which is torch-free, so it runs
on a login node without the [train] extra; so does ``demo-corpus``. ``export`` imports
torch inside the command.
"""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import ConfigError, SlurmtrainError, UsageError
from .base import main
from .refs import resolve_run, runs_dir_option

_DTYPES = ("float32", "bfloat16", "float16")


def presets_table() -> str:
    """The text ``slurmtrain models`` prints: one row per preset, columns aligned."""
    from ..recipes.presets import PRESETS, human_count, param_count

    header = ("preset", "params", "", "dim", "layers", "heads", "kv_heads", "ffn_dim", "vocab",
              "max_seq_len", "rope_theta", "tied")
    rows = [header]
    for name, a in PRESETS.items():
        n = param_count(a)
        rows.append((name, f"{n:,}", human_count(n), str(a.dim), str(a.n_layers), str(a.n_heads),
                     str(a.n_kv_heads), str(a.ffn_dim), str(a.vocab_size), str(a.max_seq_len),
                     f"{a.rope_theta:g}", "yes" if a.tie_embeddings else "no"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = []
    for row in rows:
        cells = [c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


@main.command()
def models() -> None:
    """List the built-in model presets with their shapes and parameter counts.

    A recipe names one under [model] (preset = "llama2-7b") and may override any field.
    """
    click.echo(presets_table())


@main.command("demo-corpus")
@click.argument("out", type=click.Path(path_type=Path), default="demo/corpus.jsonl")
@click.option("--max-mb", type=click.FloatRange(min=0.01), default=8.0, show_default=True,
              help="Stop after about this many megabytes.")
def demo_corpus(out: Path, max_mb: float) -> None:
    """Build a demo corpus (jsonl) from text already on this machine; downloads nothing.

    OUT defaults to demo/corpus.jsonl, where the tiny-demo recipe looks when the
    trainer starts in the same directory.
    """
    from ..data.demo_corpus import write_demo_corpus
    again = " (replacing the one there)" if out.is_file() else ""
    click.echo(f"gathering up to {max_mb:g} MB of text on this machine into {out}{again}...", err=True)
    n_docs, n_bytes = write_demo_corpus(out, int(max_mb * 1e6))
    if n_docs == 0:
        raise UsageError("found no text on this machine to build a corpus from")
    click.echo(f"wrote {out}: {n_docs} documents, {n_bytes / 1e6:.1f} MB")


def _load_consolidated():
    """The trainer's checkpoint reader, imported only when a command needs it."""
    try:
        from ..train.engines import load_consolidated
    except ModuleNotFoundError as err:
        if err.name and err.name.split(".")[0] in ("torch", "safetensors"):
            raise UsageError(f"export needs the trainer's dependencies ({err.name} is missing): "
                             "pip install 'slurmtrain[train]'") from None
        raise SlurmtrainError(f"cannot read checkpoints: {err}") from None
    except ImportError as err:
        raise SlurmtrainError(f"cannot read checkpoints: {err}") from None
    return load_consolidated


@main.command()
@click.argument("ref", metavar="RUN")
@runs_dir_option
@click.option("--hf", "out", required=True, type=click.Path(path_type=Path),
              help="Folder to write the Hugging Face checkpoint to (config.json, *.safetensors).")
@click.option("--dtype", type=click.Choice(_DTYPES), default=None,
              help="Cast weights to this type (default: as saved in the checkpoint).")
@click.option("--max-shard-gb", type=click.FloatRange(min=0, min_open=True), default=5.0,
              show_default=True, help="Split weights into files of at most this many GiB.")
@click.option("--overwrite", is_flag=True,
              help="Write into OUT even if it already holds a checkpoint.")
def export(ref: str, runs_dir: str, out: Path, dtype: str | None, max_shard_gb: float,
           overwrite: bool) -> None:
    """Export the newest complete checkpoint of RUN as a Hugging Face Llama.

    The result loads with transformers.LlamaForCausalLM.from_pretrained(OUT). RUN is a
    run directory, a run name under --runs-dir or a unique prefix of one, a job id, or a
    job name (its latest run).
    """
    found = resolve_run(ref, runs_dir)
    run = found.path
    _not_a_sweep(found)
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out}: exists and is not a directory")
    if out.is_dir() and not overwrite and any(
            p.name == "config.json" or p.suffix == ".safetensors" for p in out.iterdir()):
        raise UsageError(f"{out}: already holds a checkpoint; pass --overwrite to replace it")

    load_consolidated = _load_consolidated()
    import torch

    from ..train.hf import export_hf
    from ..recipes.presets import human_count, param_count

    try:
        args, state_dict = load_consolidated(run)
    except ConfigError as err:
        if "no complete checkpoint" not in str(err):
            raise
        raise UsageError(f"{found.name}: no complete checkpoint of the built-in trainer in {run / 'checkpoints'} "
                         "(export reads those of `python -m slurmtrain.train`, --recipe; a program of your own "
                         "saves its own)") from None
    tokens, said = _tokenizer_of(found, out)
    written = export_hf(state_dict, args, out,
                        dtype=getattr(torch, dtype) if dtype else None,
                        max_shard_bytes=int(max_shard_gb * 2**30), extra_config=tokens)
    from ..train.checkpoint import newest_complete
    newest = newest_complete(run, warn=False)
    step = f" (its checkpoint of step {newest[0]})" if newest else ""
    click.echo(f"exported {human_count(param_count(args))} parameters from {run}{step} to {out} "
               f"({len(written)} model files)" + (f"; {said}" if said else ""))


def _not_a_sweep(found) -> None:
    """A sweep's checkpoints are its points': say so, not "no complete checkpoint"."""
    from ..runs import sweeps
    labels = [p["label"] for p in sweeps.points(found)]
    if labels:
        raise UsageError(f"{found.name} is a sweep: export one of its points ({found.name}/points/LABEL; its "
                         f"points: {', '.join(labels)})")


def _tokenizer_of(found, out: Path) -> tuple[dict, str]:
    """The run's tokenizer for the export: its BOS/EOS ids for config.json, its
    tokenizer.json copied beside the weights; and what to say of it."""
    import json

    from ..data.tokenizer import load_tokenizer
    from ..recipes.inputs import tokenizer_file
    from ..train.checkpoint import META, newest_complete
    newest = newest_complete(found.path)
    if newest is None or not (newest[1] / META).is_file():
        return {}, ""
    meta = json.loads((newest[1] / META).read_text())
    name = ((meta.get("recipe") or {}).get("data") or {}).get("tokenizer")
    if name and not Path(name).is_absolute():  # the recipe's path is from where the run was submitted
        name = str(Path(found.manifest().get("submit_cwd") or ".") / name)
    try:
        tok = load_tokenizer(name)
    except (ConfigError, OSError) as err:
        return {}, f"its tokenizer ({name}) could not be read ({err}): config.json has no BOS/EOS ids"
    ids = {"bos_token_id": tok.bos_id, "eos_token_id": tok.eos_id}
    if not name:
        return ids, (f"byte-level tokenizer (ids 0-255 are UTF-8 bytes, BOS {tok.bos_id}, EOS {tok.eos_id}; "
                     "no tokenizer file)")
    out.mkdir(parents=True, exist_ok=True)
    _hf_tokenizer(tokenizer_file(name), out, tok.bos_id, tok.eos_id)
    return ids, (f"tokenizer.json and tokenizer_config.json written (BOS {tok.bos_id}, EOS {tok.eos_id}; "
                 "BOS put before each text, as the trainer did)")


def _hf_tokenizer(source: Path, out: Path, bos: int, eos: int) -> None:
    """The run's tokenizer as transformers' AutoTokenizer loads it: its BOS and EOS named
    (tokenizer_config.json), and BOS put before each text as the trainer's documents began
    (a post-processor, where the file has none of its own)."""
    import json
    data = json.loads(source.read_text())
    names = {t["id"]: t["content"] for t in data.get("added_tokens") or [] if "id" in t and "content" in t}
    vocab = (data.get("model") or {}).get("vocab")
    if isinstance(vocab, dict):
        names = {**{i: w for w, i in vocab.items()}, **names}
    bos_name, eos_name = names.get(bos), names.get(eos)
    if bos_name and not data.get("post_processor"):
        data["post_processor"] = {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": bos_name, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": bos_name, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": bos_name, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {bos_name: {"id": bos_name, "ids": [bos], "tokens": [bos_name]}}}
    (out / "tokenizer.json").write_text(json.dumps(data, ensure_ascii=False))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": bos_name, "eos_token": eos_name,
              "add_bos_token": True, "add_eos_token": False, "clean_up_tokenization_spaces": False}
    (out / "tokenizer_config.json").write_text(json.dumps({k: v for k, v in config.items() if v is not None},
                                                          indent=1) + "\n")
