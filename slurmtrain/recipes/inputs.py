"""What a recipe asks of the world it runs in: a batch that divides over the ranks, a
corpus and a tokenizer file that exist. Torch-free, so the same checks run twice: in the
trainer before its process group starts, and in ``gen``/``submit`` before a job is queued.

Relative paths are taken against ``base``: the directory the trainer starts in.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Mapping

from ..errors import ConfigError
from ..schema import Sources
from .recipe import DEMO_CORPUS, Recipe

SUFFIXES = (".jsonl", ".txt")  # corpus files read from a folder
_VAR = re.compile(r"\$(\w+)|\$\{(\w+)\}")


def check_batch(global_batch: int, micro: int, world: int, source: str, world_note: str = "") -> int:
    """Gradient-accumulation steps, or a ConfigError naming the numbers (and, in
    ``world_note``, where the world size comes from)."""
    if global_batch % (micro * world):
        note = f" ({world_note})" if world_note else ""
        raise ConfigError(source, "train.global_batch_size",
                          f"{global_batch} is not divisible by micro_batch_size x world size = "
                          f"{micro} x {world}{note} = {micro * world}")
    return global_batch // (micro * world)


def check_pipeline(recipe: Recipe, sources: Sources, world: int, world_note: str = ""
                   ) -> tuple[int, int, int]:
    """(data-parallel ranks, gradient-accumulation micro-batches per rank, pipeline
    micro-batches per step), or a ConfigError naming the keys and numbers. One stage: the
    world is all data-parallel and the batch check is :func:`check_batch`'s."""
    pp, cfg = recipe.pipeline, recipe.train
    note = f" ({world_note})" if world_note else ""
    if world % pp.stages:
        raise ConfigError(sources.of("pipeline.stages"), "pipeline.stages",
                          f"world size {world}{note} is not divisible by {pp.stages} stages")
    dp = world // pp.stages
    accum = check_batch(cfg.global_batch_size, cfg.micro_batch_size, dp,
                        sources.of_rule("train.global_batch_size", "train.micro_batch_size"),
                        world_note if pp.stages == 1 else
                        f"data-parallel ranks = world size {world} / {pp.stages} stages"
                        + (f"; {world_note}" if world_note else ""))
    if pp.stages * pp.stages_per_rank == 1:
        return dp, accum, accum
    per_rank = cfg.global_batch_size // dp
    micro = pp.microbatches or accum
    key = "pipeline.microbatches"
    if per_rank % micro:
        raise ConfigError(sources.of(key), key,
                          f"{micro}: the {per_rank} sequences each pipeline trains on per step "
                          f"(train.global_batch_size {cfg.global_batch_size} / {dp} data-parallel "
                          "ranks) do not divide into that many micro-batches")
    if pp.schedule != "gpipe" and micro < pp.stages:
        raise ConfigError(sources.of(key), key,
                          f"{micro} micro-batches per step, fewer than the {pp.stages} stages "
                          f"schedule {pp.schedule} needs (set pipeline.microbatches, or lower "
                          "train.micro_batch_size)")
    if pp.schedule == "interleaved-1f1b" and micro % max(1, micro // pp.stages):
        raise ConfigError(sources.of(key), key,
                          f"{micro} micro-batches per step: interleaved-1f1b runs them in rounds "
                          f"of {pp.stages} (the stages), so it needs a multiple of "
                          f"{max(1, micro // pp.stages)}")
    return dp, accum, micro


def _expanded(path: str, env: Mapping[str, str] | None) -> str:
    env = os.environ if env is None else env
    return _VAR.sub(lambda m: env.get(m.group(1) or m.group(2), m.group(0)), os.path.expanduser(path))


def expand(path: str, base: Path | None = None, env: Mapping[str, str] | None = None) -> Path:
    """``~`` and ``$VARS`` (from ``env``, default: this process's environment) expanded, an
    unknown variable left as written; a relative path taken against ``base`` (default:
    the current directory)."""
    p = Path(_expanded(path, env))
    return p if p.is_absolute() else (base or Path.cwd()) / p


def is_relative(path: str, env: Mapping[str, str] | None = None) -> bool:
    return not Path(_expanded(path, env)).is_absolute()


def knowable(path: str, env: Mapping[str, str] | None = None) -> bool:
    """Whether every variable in ``path`` is known here (else only the job can tell)."""
    env = os.environ if env is None else env
    return all((m.group(1) or m.group(2)) in env for m in _VAR.finditer(path))


def corpus_files(path: Path, source: str, given: str | None = None, where: str = "") -> list[Path]:
    """The corpus's files: ``path`` itself, or the .jsonl/.txt files under it.

    ``given`` is the path as the recipe wrote it (the demo corpus gets a hint how to make
    it); ``where`` says which directory a relative path was taken against."""
    if not path.exists():
        hint = f" ({where})" if where else ""
        if given == DEMO_CORPUS:
            hint += f"; build it with `slurmtrain demo-corpus` in {path.parent.parent}"
        raise ConfigError(source, "data.path", f"no such file or folder: {path}{hint}")
    if path.is_file():
        return [path]
    if (path / "index.json").is_file() or (path / "plan.json").is_file():
        return [path]  # written by `slurmtrain tokenize` (shards.is_tokenized; read by data.py)
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in SUFFIXES)
    if not files:
        raise ConfigError(source, "data.path", f"{path} holds no .jsonl or .txt files")
    return files


def tokenizer_file(path: str, base: Path | None = None, where: str = "",
                   env: Mapping[str, str] | None = None) -> Path:
    """The tokenizer.json a ``data.tokenizer`` value names (a file, or a folder holding one)."""
    p = expand(path, base, env)
    if p.is_dir():
        p = p / "tokenizer.json"
    if not p.is_file():
        hint = f" ({where})" if where else ""
        raise ConfigError(str(path), "data.tokenizer", f"no such tokenizer file: {p}{hint} (expected "
                          "a tokenizer.json or a folder holding one)")
    return p


def check_files(recipe: Recipe, sources: Sources, base: Path, where: str = "",
                env: Mapping[str, str] | None = None) -> None:
    """The corpus and the tokenizer exist, seen from ``base`` (``where`` says what that
    directory is). A path naming a variable unknown here is left to the job."""
    tok, data = recipe.data.tokenizer, recipe.data.path
    if tok and knowable(tok, env):
        try:
            found = tokenizer_file(tok, base, where if is_relative(tok, env) else "", env)
        except ConfigError as err:  # name the recipe (or --set) that gave the value
            raise ConfigError(sources.of("data.tokenizer"), "data.tokenizer", err.message) from None
        _check_vocab(recipe, sources, found)
    elif not tok:
        _check_vocab(recipe, sources, None)
    if knowable(data, env):
        corpus_files(expand(data, base, env), sources.of("data.path"), data,
                     where if is_relative(data, env) else "")
        if not tok or knowable(tok, env):
            check_tokenized_with(expand(data, base, env), tokenizer_file(tok, base, env=env) if tok else None,
                                 sources.of("data.tokenizer"))


BYTE_VOCAB = 258  # the byte-level tokenizer's ids: 256 bytes, BOS and EOS (data/tokenizer.py)


def tokenizer_vocab(tok: Path | None) -> int | None:
    """How many ids a tokenizer file gives, its vocabulary's and its added tokens' (as the
    `tokenizers` library counts them), read as JSON so that `gen` stays light; None where
    the file does not say."""
    if tok is None:
        return BYTE_VOCAB
    import json
    try:
        data = json.loads(tok.read_text())
    except (OSError, ValueError):
        return None  # the trainer's load says what is wrong with it
    vocab = (data.get("model") or {}).get("vocab") if isinstance(data, dict) else None
    ids = set(vocab.values()) if isinstance(vocab, dict) else set(range(len(vocab))) if isinstance(vocab, list) else set()
    ids |= {t["id"] for t in data.get("added_tokens") or [] if isinstance(t, dict) and isinstance(t.get("id"), int)}
    return len(ids) or None


def _check_vocab(recipe: Recipe, sources: Sources, tok: Path | None) -> None:
    """The model has an embedding for every id the tokenizer gives (the trainer's own check,
    before the queue)."""
    from .recipe import model_args
    size, vocab = tokenizer_vocab(tok), model_args(recipe).vocab_size
    if size is not None and size > vocab:
        raise ConfigError(sources.of("model.vocab_size"), "model.vocab_size",
                          f"{vocab} is smaller than the tokenizer's {size} ({tok or 'bytes'}); set model.vocab_size")


def check_tokenized_with(corpus: Path, tok: Path | None, source: str) -> None:
    """A tokenized ``corpus`` (its index.json) was written with the tokenizer file ``tok``
    (None: the byte-level one), compared by content hash as the trainer does
    (``data.check_tokenizer``); json and hashlib only, so `gen` stays light. An unfinished
    tokenization (no index yet, its job may still run) is left to the trainer."""
    index_file = corpus / "index.json"
    if not index_file.is_file():
        return
    import hashlib
    import json

    theirs = json.loads(index_file.read_text()).get("tokenizer", {})
    ours = "bytes" if tok is None else hashlib.sha256(tok.read_bytes()).hexdigest()
    if theirs.get("sha256") != ours:
        raise ConfigError(source, "data.tokenizer",
                          f"{corpus} was tokenized with {theirs.get('name')} (sha256 {str(theirs.get('sha256'))[:12]}), "
                          f"but the recipe's tokenizer is {tok or 'bytes'} (sha256 {ours[:12]}); "
                          "tokenize again with the recipe's tokenizer, or set data.tokenizer to it")
