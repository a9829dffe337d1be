"""What the CPU benchmarks of the trainer share (bench_pipeline_cpu.py, bench_deepspeed_cpu.py):
the recipe they write, a run of the trainer under torchrun, and the header line."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "train"))

from trainer_util import write_corpus  # noqa: E402,F401 - re-exported for the scripts

RECIPE = """\
[model]
preset = "tiny"
{model}
[data]
path = "corpus.jsonl"
max_seq_len = 128
val_fraction = 0.0

[train]
steps = {steps}
global_batch_size = {global_batch}
micro_batch_size = {micro_batch}
log_steps = 1
"""
WIDE = "dim = 256\nn_layers = 4\nffn_dim = 688\n"


def recipe(model: str, steps: int, global_batch: int, micro_batch: int) -> str:
    """tiny (with ``model``'s overrides), log_steps = 1 so that ``step_time`` is per step."""
    return RECIPE.format(model=model, steps=steps, global_batch=global_batch, micro_batch=micro_batch)


def run_trainer(work: Path, name: str, extra: list[str], nproc: int, threads: int = 1) -> list[dict]:
    """The trainer on ``work/recipe.toml`` under torchrun with ``nproc`` processes; its
    metrics records that carry a loss."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
           "-m", "slurmtrain.train", "--recipe", "recipe.toml", "--run-dir", name, *extra]
    subprocess.run(cmd, cwd=work, env=env, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    lines = (work / name / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if "loss" in r]


def header(what: str) -> str:
    """The first line of a report: date, machine, its load."""
    return (f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.node()}, "
            f"{os.cpu_count()} CPUs, {platform.processor() or platform.machine()}, "
            f"load average {os.getloadavg()[0]:.1f} at start, {what}")
