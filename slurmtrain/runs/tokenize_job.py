"""`slurmtrain tokenize ... --profile P --nodes N`: the tokenization as a tracked Slurm job array.

The job is rendered by :func:`slurmtrain.render.render` from the profile like a training
job (same script, container, environment, run directory, events, status/logs/cancel),
as a job array of N tasks (``#SBATCH --array=0-<N-1>``) of one node each, with the
``srun`` launcher and one process on that node: task k runs ``slurmtrain tokenize ...
--part slurm``, which takes k and N from ``SLURM_ARRAY_TASK_ID``/``COUNT``, i.e. the
k-th of N contiguous groups of shards; the task that finds every shard done writes the
combined index (see ``pretokenize.tokenize_corpus``). An array rather than one N-node
job: each task starts as soon as a node is free instead of waiting for N at once, and
a task that is stopped or fails is requeued or rerun by itself; the shards do not
depend on how they are grouped or in which order the groups run.

The tasks share one run directory: every event a task's script writes names the task
(``slurmtrain.eventlog`` follows each task by itself and combines them), and each task's
logs are named ``<array job id>_<task>``.

Torch-free: rendering and submitting import neither torch nor the tokenizer.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from ..profile import LoadedProfile, load_profile
from ..render import JobSpec

# What a tokenize job changes in any profile: no GPUs, one node per array task, one
# process on it that the launcher starts directly, and a requeue after a stop even without
# a trainer checkpoint (finished shards are kept: a requeued task resumes).
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


def build(profile: str, sets: list[str | tuple[str, str]], job_name: str, argv: tuple[str, ...],
          regen_args: list[str]) -> tuple[LoadedProfile, JobSpec]:
    """The profile (one node per task) and the job: an array of as many tasks as the
    profile's ``slurm.nodes`` after ``sets`` (``--nodes N``)."""
    tasks = load_profile(profile, [*sets, *FORCED]).profile.slurm.nodes
    loaded = load_profile(profile, [*sets, *FORCED, "slurm.nodes=1"])
    job = JobSpec(command=argv, job_name=job_name, array=tasks,
                  regen_command=shlex.join(["slurmtrain", "tokenize", *regen_args]))
    return loaded, job
