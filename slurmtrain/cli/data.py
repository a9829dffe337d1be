"""Commands for corpora: tokenize (raw text -> memory-mapped token shards for the trainer).

Imports numpy and ``tokenizers`` inside the command only (never torch), so the CLI stays
light; the work lives in :mod:`slurmtrain.data.pretokenize`.
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from ..errors import UsageError
from .base import main
from .refs import after_options, chain_of, follow_up, runs_dir_option


def _job_options(f):
    """--profile and what goes with it (the same work as a Slurm job array), the runs
    directory and a chain's --after: handed to the command as its ``**job``."""
    decorators = [
        click.option("--profile", "-p", default=None,
                     help="Submit the work as a Slurm job array on this cluster profile instead of running "
                          "it here: one task of one node per group of shards; tracked in a run directory."),
        click.option("--nodes", "-N", type=click.IntRange(min=1),
                     help="With --profile: tasks of the job array, one node each (default: the profile's "
                          "slurm.nodes)."),
        click.option("--time", "-t", "time_limit", help="With --profile: time limit (slurm.time)."),
        click.option("--partition", help="With --profile: partition (slurm.partition)."),
        click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
                     help="With --profile: override a profile key (repeatable)."),
        click.option("--name", "job_name", default="tokenize", show_default=True, help="With --profile: job name."),
        click.option("--dry-run", is_flag=True, help="With --profile: print the job script instead of submitting it."),
    ]
    for d in reversed(decorators):
        f = d(f)
    return after_options(runs_dir_option(f))


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
              help="Only the P-th of N groups of shards (1-based), for one task of a Slurm job; "
                   "'slurm' takes P and N from the task's SLURM_ARRAY_TASK_ID/COUNT or "
                   "SLURM_PROCID/NTASKS. The part that finds every shard done writes the index.")
@click.option("--progress-every", type=click.FloatRange(min=0), default=5.0, show_default=True,
              help="Seconds between progress lines.")
@_job_options
def tokenize(inputs: tuple[Path, ...], tokenizer: str, out: Path, text_field: str,
             processes: int | None, skip_bad: bool, shard_mb: float, part: str | None,
             progress_every: float, **job) -> None:
    """Tokenize INPUT... (.jsonl, .txt, and .gz/.zst of them; folders are searched) into
    token shards that the trainer memory-maps.

    Uses every core (one process each); the shards do not depend on the number of
    processes. Run the same command again to resume after an interruption: finished
    shards are kept. A .txt file is one document; a .jsonl line is one document.

    With --profile, submits the same work as a Slurm job array (#SBATCH --array=0-<N-1>):
    N tasks of one node each, task k tokenizing the k-th of N groups of shards, each
    starting whenever a node is free; the task that finds every shard done writes the
    combined index. One run directory holds them all: `slurmtrain status` combines the
    tasks (COMPLETED once every task has), `logs` shows each task's, `cancel` ends them
    all. --out must be on a file system every node sees.

    \b
      slurmtrain tokenize corpus/ --tokenizer tokenizer.json --out data/tok
      slurmtrain tokenize corpus/ --tokenizer tokenizer.json --out data/tok -p mycluster -N 8
    """
    if job["profile"] is not None:
        if part is not None:
            raise UsageError("--part is for one task of a job; with --profile slurmtrain chooses the parts")
        _submit(inputs, tokenizer, out, text_field, processes, skip_bad, shard_mb, progress_every, **job)
        return
    if any(job[k] is not None for k in ("nodes", "time_limit", "partition")) or job["sets"] or job["dry_run"] \
            or job["after"] or job["after_ok"] or job["after_any"]:
        raise UsageError("--nodes, --time, --partition, --set, --dry-run and --after need --profile (a Slurm job)")
    _tokenize_here(inputs, tokenizer, out, text_field=text_field, processes=processes, skip_bad=skip_bad,
                   unit_bytes=max(1, int(shard_mb * 1e6)), progress_every=progress_every, part=_part(part))


def _tokenize_here(inputs: tuple[Path, ...], tokenizer: str, out: Path, **how) -> None:
    """The work on this machine, with its progress lines and its summary."""
    try:
        from ..data.pretokenize import tokenize_corpus
    except ModuleNotFoundError as err:
        raise UsageError(f"tokenize needs numpy and tokenizers ({err.name} is missing): "
                         "pip install 'slurmtrain[train]'") from None
    index = tokenize_corpus(list(inputs), tokenizer, out, echo=click.echo, **how)
    if index is None:
        return
    click.echo(f"wrote {out}: {index['n_docs']:,} documents, {index['n_tokens']:,} tokens "
               f"({index['dtype']}) in {len(index['shards'])} shards")
    if index["n_skipped"]:
        click.echo(f"skipped {index['n_skipped']} bad lines or files; the first:", err=True)
        for s in index["skipped"]:
            click.echo(f"  {s}", err=True)


def _submit(inputs, tokenizer, out, text_field, processes, skip_bad, shard_mb, progress_every,
            profile, nodes, time_limit, partition, sets, job_name, runs_dir, dry_run, after, after_ok,
            after_any) -> None:
    """Check what can be checked here (inputs exist), then render and submit the job."""
    import sys

    from ..runs import tokenize_job
    from .options import overrides
    from ..runs.submit import submit as submit_job
    from ..data.pretokenize import input_files  # numpy only

    input_files(list(inputs))
    if tokenizer != "bytes" and not Path(tokenizer).exists():
        raise UsageError(f"--tokenizer {tokenizer}: no such file or folder")
    argv = tokenize_job.tokenize_argv(list(inputs), tokenizer, out, text_field=text_field,
                                      processes=processes, skip_bad=skip_bad, shard_mb=shard_mb,
                                      progress_every=progress_every)
    assigned = overrides(nodes, None, time_limit, partition, None, None, sets)
    loaded, job = tokenize_job.build(profile, assigned, job_name, argv, sys.argv[2:])
    if dry_run:
        from ..render import render
        click.echo(render(loaded, job), nl=False)
        return
    afters = chain_of(runs_dir, after, after_ok, after_any)
    done = submit_job(loaded, job, runs_dir, after=afters)
    cli, hint = follow_up(runs_dir)
    click.echo(f"submitted array job {done.job_id}: {job.array} tasks of one node each, each starting "
               "when a node is free")
    if afters:
        from ..runs.chain import waiting_note
        click.echo(waiting_note(afters, "Dependency"))
    click.echo(f"run directory: {done.run.path}")
    click.echo(f"follow it: {cli} status{hint} {done.run.name}; {cli} logs{hint} -f {done.run.name}")
    click.echo(f"when it completes, {out / 'index.json'} exists: set the recipe's data.path to {out}")


def _part(value: str | None) -> tuple[int, int] | None:
    """"P/N" (1-based) -> (P - 1, N); "slurm": this task's place in its job or array."""
    if value is None:
        return None
    if value == "slurm":
        env = os.environ
        for k, n in (("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT"), ("SLURM_PROCID", "SLURM_NTASKS")):
            if env.get(k, "").isdigit() and env.get(n, "").isdigit():
                return _part(f"{int(env[k]) + 1}/{env[n]}")
        raise UsageError("--part slurm: not in a Slurm task (no SLURM_PROCID/SLURM_NTASKS)")
    try:
        p, n = (int(x) for x in value.split("/"))
    except ValueError:
        raise UsageError(f"--part {value}: expected P/N, e.g. 1/4") from None
    if not 1 <= p <= n:
        raise UsageError(f"--part {value}: P must be between 1 and N")
    return p - 1, n
