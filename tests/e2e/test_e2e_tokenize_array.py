"""`slurmtrain tokenize ... --profile local --nodes 2` on the sandbox: one rendered, tracked
job whose two tasks (one per node) each tokenize a group of a multi-file corpus's shards;
the task that finishes last writes the combined index; `status` and `logs` follow the run
like a training run's; then `slurmtrain submit --recipe` trains on the result.

Rendezvous ports: this file's range, 29840-29859."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from e2e_util import cli, submit, wait_final

pytestmark = [pytest.mark.slurm, pytest.mark.torch, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "train"))
from trainer_util import RECIPE, write_corpus  # noqa: E402

PORTS = ("--set", "launch.rdzv_port=29840", "--set", "launch.rdzv_port_spread=20")


def test_tokenize_job_on_two_nodes_then_a_run_trains_on_it(tmp_path):
    (tmp_path / "corpus").mkdir()
    for i in range(4):  # 4 files of ~9 KB in 5 KB pieces: 8 shards, 4 per task
        write_corpus(tmp_path / "corpus" / f"{i}.jsonl", 50)
    proc = cli(tmp_path, "tokenize", "corpus", "--tokenizer", "bytes", "--out", "tok", "--shard-mb", "0.005",
               "-j", "1", "--profile", "local", "--nodes", "2", "--progress-every", "1", *PORTS)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    name = Path(next(line.split(": ", 1)[1] for line in proc.stdout.splitlines()
                     if line.startswith("run directory: "))).name
    script = (tmp_path / "runs" / name / "job.sbatch").read_text()
    # rendered like any job from the profile and the options
    assert "#SBATCH --nodes=2" in script and "--part slurm" in script and "29840 + SLURM_JOB_ID % 20" in script

    final = wait_final(tmp_path, [name])[name]
    logs = cli(tmp_path, "logs", name).stdout
    assert (final["state"], final["exit_code"]) == ("COMPLETED", 0), logs[-4000:]
    index = json.loads((tmp_path / "tok" / "index.json").read_text())
    assert index["n_docs"] == 200 and len(index["shards"]) == 8, logs[-4000:]
    assert {s["input"] for s in index["shards"]} == {0, 1, 2, 3}
    # one group per node; a part that finds every shard done writes the index (both, when they
    # finish at the same moment: the same file, written atomically, so either may)
    assert "part 1 of 2: shards 00000 to 00003" in logs and "part 2 of 2: shards 00004 to 00007" in logs
    assert logs.count("every shard is done; writing the index") >= 1, logs[-4000:]
    assert "==> stnode1" in logs and "==> stnode2" in logs

    recipe = RECIPE.format(steps=5, save_steps=0).replace('path = "corpus.jsonl"', f'path = "{tmp_path / "tok"}"')
    (tmp_path / "recipe.toml").write_text(recipe)
    train = submit(tmp_path, "--profile", "local", "--recipe", str(tmp_path / "recipe.toml"), "--nodes", "1",
                   "--set", "launch.procs_per_node=1", *PORTS, "--name", "on-tok")
    final = wait_final(tmp_path, [train])[train]
    assert (final["state"], final["exit_code"]) == ("COMPLETED", 0), cli(tmp_path, "logs", train).stdout[-4000:]
    metrics = [json.loads(line) for line in (tmp_path / "runs" / train / "metrics.jsonl").read_text().splitlines()]
    assert max(m["step"] for m in metrics if "loss" in m) == 5
