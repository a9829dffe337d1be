"""`slurmtrain tokenize` as a Slurm job array on the sandbox: each task tokenizes its group
of shards (--part), a job that depends on the array writes the combined index, and a
training run on the result completes.

The array is written by hand here (sbatch --array): `tokenize` has no --profile/--nodes
surface through the rendered scripts and `runs` yet."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import waiting

pytestmark = [pytest.mark.slurm, pytest.mark.torch, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "train"))
from trainer_util import RECIPE, write_corpus  # noqa: E402

TOKENIZE = f"{sys.executable} -c 'from slurmtrain.cli import main; main()' tokenize corpus --tokenizer bytes --out tok -j 1"
ARRAY = f"""#!/bin/bash
#SBATCH --array=0-1
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --output=logs/tokenize-%A_%a.out
set -euo pipefail
echo "$SLURMD_NODENAME" > "nodes/$SLURM_ARRAY_TASK_ID"
{TOKENIZE} --shard-mb 0.01 --part $((SLURM_ARRAY_TASK_ID + 1))/$SLURM_ARRAY_TASK_COUNT
"""
FINAL = f"""#!/bin/bash
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --output=logs/final-%j.out
set -euo pipefail
{TOKENIZE} --shard-mb 0.01
OMP_NUM_THREADS=1 {sys.executable} -m slurmtrain.train --recipe recipe.toml --data-path tok --run-dir run
"""


def sbatch(cwd: Path, *args: str) -> str:
    out = subprocess.run(["sbatch", "--parsable", *args], cwd=cwd, capture_output=True, text=True,
                         timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().split(";")[0]


def test_array_tokenizes_then_a_run_trains_on_it(tmp_path):
    (tmp_path / "corpus").mkdir()
    for i in range(4):  # 4 files, 4 shards: 2 per task
        write_corpus(tmp_path / "corpus" / f"{i}.jsonl", 50)
    (tmp_path / "recipe.toml").write_text(RECIPE.format(steps=5, save_steps=0))
    for d in ("logs", "nodes"):
        (tmp_path / d).mkdir()
    (tmp_path / "array.sbatch").write_text(ARRAY)
    (tmp_path / "final.sbatch").write_text(FINAL)
    array = sbatch(tmp_path, "array.sbatch")
    final = sbatch(tmp_path, f"--dependency=afterok:{array}", "final.sbatch")

    def queued() -> str:
        return subprocess.run(["squeue", "-h", "-j", f"{array},{final}", "-o", "%i %T"],
                              capture_output=True, text=True, timeout=60).stdout

    def logs() -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-2000:]}" for p in sorted((tmp_path / "logs").iterdir()))

    waiting.wait_for("the array and the final job", lambda: not queued().strip(),
                     lambda: (queued(), waiting.files_fingerprint(tmp_path)), poll=1, details=logs)
    index = json.loads((tmp_path / "tok" / "index.json").read_text())
    assert index["n_docs"] == 200 and len(index["shards"]) == 4, logs()  # one per file
    assert sorted(p.name for p in (tmp_path / "nodes").iterdir()) == ["0", "1"]
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert max(m["step"] for m in metrics if "loss" in m) == 5, logs()
    assert "part 1 of 2: shards" in logs() and "part 2 of 2: shards" in logs()
