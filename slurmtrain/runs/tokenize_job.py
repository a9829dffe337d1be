"""`slurmtrain tokenize ... --profile P --nodes N`: the tokenization as a tracked Slurm job.

The job is rendered by :func:`slurmtrain.render.render` from the profile like a training
job (same script, container, environment, run directory, events, status/logs/cancel), with
the ``srun`` launcher and one task per node: task k runs ``slurmtrain tokenize ... --part
slurm``, i.e. the k-th of N contiguous groups of shards, and the task that finishes last
writes the combined index (see ``pretokenize.tokenize_corpus``). One job with N tasks rather
than a ``--array``: the run directory, the job script's events and requeue, and `status`
all follow one job id per start; the shards do not depend on how they are grouped.

Torch-free: rendering and submitting import neither torch nor the tokenizer.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from ..profile import LoadedProfile, load_profile
from ..render import JobSpec

# What a tokenize job changes in any profile: no GPUs, one process per node that the
# launcher starts directly, and a requeue after a stop even without a trainer checkpoint
# (finished shards are kept: a requeued job resumes).
FORCED = ('launch.launcher="srun"', "launch.procs_per_node=1", "slurm.gpus_per_node=0",
          'resilience.requeue_when="always"')


def tokenize_argv(inputs: list[Path], tokenizer: str, out: Path, *, text_field: str, processes: int | None,
                  skip_bad: bool, shard_mb: float, progress_every: float) -> tuple[str, ...]:
    """The command every task runs: absolute paths (tasks start in the job's directory)."""
    tok = tokenizer if tokenizer == "bytes" else str(Path(tokenizer).resolve())
    argv = ["python3", "-m", "slurmtrain", "tokenize", *(str(p.resolve()) for p in inputs),
            "--tokenizer", tok, "--out", str(out.resolve()), "--field", text_field,
            "--shard-mb", repr(shard_mb), "--progress-every", repr(progress_every), "--part", "slurm"]
    if processes:
        argv += ["-j", str(processes)]
    if skip_bad:
        argv.append("--skip-bad")
    return tuple(argv)


def build(profile: str, sets: list[str], job_name: str, argv: tuple[str, ...],
          regen_args: list[str]) -> tuple[LoadedProfile, JobSpec]:
    loaded = load_profile(profile, [*sets, *FORCED])
    job = JobSpec(command=argv, job_name=job_name,
                  regen_command=shlex.join(["slurmtrain", "tokenize", *regen_args]))
    return loaded, job

