"""`slurmtrain tokenize ... --profile local --nodes 2` on the sandbox: a rendered, tracked
job array of two one-node tasks, each tokenizing a group of a multi-file corpus's shards;
the task that finds every shard done writes the combined index; `status` combines the
tasks and `logs` shows each task's; then `slurmtrain submit --recipe` trains on the result.

Rendezvous ports: this file's range, 29840-29859."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from e2e_util import cli, submit, wait_final

pytestmark = [pytest.mark.slurm, pytest.mark.torch, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "train"))
from trainer_util import RECIPE, write_corpus  # noqa: E402

PORTS = ("--set", "launch.rdzv_port=29840", "--set", "launch.rdzv_port_spread=20")


def submit_tokenize(tmp_path: Path) -> tuple[str, str]:
    """(run name, array job id) of the tokenize job array over a 4-file corpus."""
    (tmp_path / "corpus").mkdir()
    for i in range(4):  # 4 files of ~9 KB in 5 KB pieces: 8 shards, 4 per task
        write_corpus(tmp_path / "corpus" / f"{i}.jsonl", 50)
    proc = cli(tmp_path, "tokenize", "corpus", "--tokenizer", "bytes", "--out", "tok", "--shard-mb", "0.005",
               "-j", "1", "--profile", "local", "--nodes", "2", "--progress-every", "1", *PORTS)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    job_id = re.search(r"^submitted array job (\d+): 2 tasks of one node each", proc.stdout, re.M)
    assert job_id, proc.stdout
    name = Path(next(line.split(": ", 1)[1] for line in proc.stdout.splitlines()
                     if line.startswith("run directory: "))).name
    return name, job_id[1]


def test_tokenize_array_on_two_nodes_then_a_run_trains_on_it(tmp_path):
    name, job_id = submit_tokenize(tmp_path)
    run = tmp_path / "runs" / name
    script = (run / "job.sbatch").read_text()
    # rendered like any job from the profile and the options: an array of one-node tasks
    assert "#SBATCH --array=0-1\n#SBATCH --nodes=1\n" in script and "--part slurm" in script
    assert f"#SBATCH --output={run}/logs/job-%A_%a.out" in script
    manifest = json.loads((run / "manifest.json").read_text())
    assert (manifest["job_ids"], manifest["array"]) == ([job_id], 2)  # the id sbatch printed: the array's

    seen: list[dict] = []
    final = wait_final(tmp_path, [name], on_poll=lambda got: seen.append(got[name]))[name]
    logs = cli(tmp_path, "logs", name).stdout
    assert (final["state"], final["exit_code"]) == ("COMPLETED", 0), logs[-4000:]
    assert final["outcome_detail"] == "all 2 tasks of the array completed"
    assert [(t["task"], t["state"]) for t in final["tasks"]] == [(0, "COMPLETED"), (1, "COMPLETED")]
    # while it ran, status said it was waiting or running, with both tasks (with accounting
    # on, as the lane leaves it after test_e2e_jobs, too: sacct's first record of an array
    # lists no task, tests/runs/test_array_events.py)
    for st in seen[:-1]:
        assert st["state"] in ("PENDING", "RUNNING", "COMPLETING") and st["outcome"] == "running", st
        assert [t["task"] for t in st["tasks"]] == [0, 1], st

    # the tasks' events, interleaved in one file, each naming its task and the array
    evs = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    ends = {(e["array_task"], e["array_job_id"]) for e in evs if e["event"] == "finished" and "exit_code" in e}
    assert ends == {(0, job_id), (1, job_id)}, evs
    assert {e["array_tasks"] for e in evs if e["event"] in ("submitted", "started")} == {2}

    index = json.loads((tmp_path / "tok" / "index.json").read_text())
    assert index["n_docs"] == 200 and len(index["shards"]) == 8, logs[-4000:]
    assert {s["input"] for s in index["shards"]} == {0, 1, 2, 3}
    # one group per task; a part that finds every shard done writes the index (both, when they
    # finish at the same moment: the same file, written atomically, so either may)
    assert "part 1 of 2: shards 00000 to 00003" in logs and "part 2 of 2: shards 00004 to 00007" in logs
    assert logs.count("every shard is done; writing the index") >= 1, logs[-4000:]
    headers = re.findall(r"^==> (task \d/\S+): ", logs, re.M)
    assert headers[0] == "task 0/batch" and "task 1/batch" in headers, headers
    assert any(re.fullmatch(r"task 0/stnode\d", h) for h in headers), headers
    assert any(re.fullmatch(r"task 1/stnode\d", h) for h in headers), headers
    text = cli(tmp_path, "status", name).stdout
    assert "state      COMPLETED" in text and "task 1  COMPLETED" in text, text

    recipe = RECIPE.format(steps=5, save_steps=0).replace('path = "corpus.jsonl"', f'path = "{tmp_path / "tok"}"')
    (tmp_path / "recipe.toml").write_text(recipe)
    train = submit(tmp_path, "--profile", "local", "--recipe", str(tmp_path / "recipe.toml"), "--nodes", "1",
                   "--set", "launch.procs_per_node=1", *PORTS, "--name", "on-tok")
    final = wait_final(tmp_path, [train])[train]
    assert (final["state"], final["exit_code"]) == ("COMPLETED", 0), cli(tmp_path, "logs", train).stdout[-4000:]
    metrics = [json.loads(line) for line in (tmp_path / "runs" / train / "metrics.jsonl").read_text().splitlines()]
    assert max(m["step"] for m in metrics if "loss" in m) == 5
