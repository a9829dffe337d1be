"""Commands for corpora: tokenize (raw text -> memory-mapped token shards for the trainer).

Imports numpy and ``tokenizers`` inside the command only (never torch), so the CLI stays
light; the work lives in :mod:`slurmtrain.train.pretokenize`.
"""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import UsageError
from .base import main


@main.command()
@click.argument("inputs", metavar="INPUT...", nargs=-1, required=True,
                type=click.Path(path_type=Path))
@click.option("--tokenizer", required=True,
              help="A tokenizer.json (or a folder holding one), or 'bytes' for the byte-level "
                   "tokenizer; use the recipe's data.tokenizer.")
@click.option("--out", required=True, type=click.Path(path_type=Path, file_okay=False),
              help="Folder to write shards and index.json to (set the recipe's data.path to it).")
@click.option("--field", "text_field", default="text", show_default=True,
              help="The JSON field holding a .jsonl line's text.")
@click.option("-j", "--processes", type=click.IntRange(min=1), default=None,
              help="Worker processes (default: every core of this machine).")
@click.option("--skip-bad", is_flag=True,
              help="Count and report bad lines and unreadable files instead of stopping.")
@click.option("--shard-mb", type=click.FloatRange(min=1e-6), default=64.0, show_default=True,
              help="Plain .jsonl files are cut into pieces of this many MB, one shard each.")
@click.option("--part", default=None, metavar="P/N",
              help="Only the P-th of N groups of shards (1-based), for one task of a Slurm array "
                   "(--part $((SLURM_ARRAY_TASK_ID + 1))/$SLURM_ARRAY_TASK_COUNT); no index. Run the "
                   "command without --part afterwards to write the index.")
@click.option("--progress-every", type=click.FloatRange(min=0), default=5.0, show_default=True,
              help="Seconds between progress lines.")
def tokenize(inputs: tuple[Path, ...], tokenizer: str, out: Path, text_field: str,
             processes: int | None, skip_bad: bool, shard_mb: float, part: str | None,
             progress_every: float) -> None:
    """Tokenize INPUT... (.jsonl, .txt, and .gz/.zst of them; folders are searched) into
    token shards that the trainer memory-maps.

    Uses every core (one process each); the shards do not depend on the number of
    processes. Run the same command again to resume after an interruption: finished
    shards are kept. A .txt file is one document; a .jsonl line is one document.
    """
    try:
        from ..train.pretokenize import tokenize_corpus
    except ModuleNotFoundError as err:
        raise UsageError(f"tokenize needs numpy and tokenizers ({err.name} is missing): "
                         "pip install 'slurmtrain[train]'") from None
    index = tokenize_corpus(list(inputs), tokenizer, out, text_field=text_field,
                            processes=processes, skip_bad=skip_bad,
                            unit_bytes=max(1, int(shard_mb * 1e6)), progress_every=progress_every,
                            part=_part(part), echo=click.echo)
    if index is None:
        return
    click.echo(f"wrote {out}: {index['n_docs']:,} documents, {index['n_tokens']:,} tokens "
               f"({index['dtype']}) in {len(index['shards'])} shards")
    if index["n_skipped"]:
        click.echo(f"skipped {index['n_skipped']} bad lines or files; the first:", err=True)
        for s in index["skipped"]:
            click.echo(f"  {s}", err=True)


def _part(value: str | None) -> tuple[int, int] | None:
    """"P/N" (1-based) -> (P - 1, N)."""
    if value is None:
        return None
    try:
        p, n = (int(x) for x in value.split("/"))
    except ValueError:
        raise UsageError(f"--part {value}: expected P/N, e.g. 1/4") from None
    if not 1 <= p <= n:
        raise UsageError(f"--part {value}: P must be between 1 and N")
    return p - 1, n
