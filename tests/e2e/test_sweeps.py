"""Sweeps on the sandbox: `submit --sweep` runs one array job with a task per point, each
point in its own run directory; a stop of one task requeues that task only, and it resumes
bitwise where an uninterrupted run of its point would be; `status`, `runs` and `plot` show
the points; a user's command gets its point's values as {key} and as variables.

Rendezvous ports: this file's range, 29880-29899."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from e2e_util import cli, statuses, submit, wait_final, wait_for_file

pytestmark = pytest.mark.slurm
REPO = Path(__file__).resolve().parents[2]
PORTS = ("--set", "launch.rdzv_port=29880", "--set", "launch.rdzv_port_spread=20")


def point_events(run: Path, label: str) -> list[dict]:
    path = run / "points" / label / "events.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def test_a_users_command_gets_each_points_values_and_a_failed_point_alone_is_resubmitted(tmp_path):
    """Each point's values as {key} in the command and as variables; point lr=3e-4 fails
    its first run (exit 3): `resubmit` refuses (a program's error), `resubmit --force` sends
    that point alone again (--array=1), in its own run directory, and the sweep completes;
    `status POINT` and `logs POINT` show the point itself."""
    code = ("import os, sys; print('argv', sys.argv[1:], 'env', os.environ['SLURMTRAIN_SWEEP_LR'], "
            "os.environ['SLURMTRAIN_SWEEP_OPT'], 'dir', os.environ['SLURMTRAIN_RUN_DIR'], flush=True)\n"
            "once = os.path.join(os.environ['SLURMTRAIN_RUN_DIR'], 'failed-once')\n"
            "if os.environ['SLURMTRAIN_SWEEP_LR'] == '3e-4' and not os.path.exists(once):\n"
            "    open(once, 'w').close(); sys.exit(3)")
    name = submit(tmp_path, "--profile", "local", "--launcher", "srun", "-N", "1", "--set", "launch.procs_per_node=1",
                  "--name", "cmd", "--sweep", "lr=1e-4,3e-4", "--sweep", "opt=adamw",
                  "--", sys.executable, "-c", code, "--lr={lr}", "{opt}")
    final = wait_final(tmp_path, [name], timeout=120)[name]
    assert final["state"] == "FAILED", final
    run = tmp_path / "runs" / name
    first = json.loads((run / "manifest.json").read_text())["job_ids"][0]
    refused = cli(tmp_path, "resubmit", name)
    assert refused.returncode == 2 and "lr=1e-4_opt=adamw: completed; lr=3e-4_opt=adamw: user error" in refused.stderr, \
        refused.stderr
    again = cli(tmp_path, "resubmit", "--force", name)
    assert again.returncode == 0 and again.stdout.strip().endswith(": point lr=3e-4_opt=adamw (task 1)"), again.stdout
    second = json.loads((run / "manifest.json").read_text())["job_ids"][-1]
    final = wait_final(tmp_path, [name], timeout=120)[name]
    assert [(r["label"], r["state"]) for r in final["sweep"]] == [
        ("lr=1e-4_opt=adamw", "COMPLETED"), ("lr=3e-4_opt=adamw", "COMPLETED")], final["sweep"]

    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["array"] == 2 and manifest["job_ids"] == [first, second]
    assert [p["label"] for p in manifest["sweep"]["points"]] == ["lr=1e-4_opt=adamw", "lr=3e-4_opt=adamw"]
    for task, (label, lr, jobs) in enumerate((("lr=1e-4_opt=adamw", "1e-4", [first]),
                                             ("lr=3e-4_opt=adamw", "3e-4", [first, second]))):
        point = run / "points" / label
        assert json.loads((point / "manifest.json").read_text())["job_ids"] == [f"{j}_{task}" for j in jobs]
        logs = list((point / "logs").glob(f"{jobs[-1]}_{task}-*.out"))
        text = "".join(p.read_text() for p in logs)
        assert f"argv ['--lr={lr}', 'adamw'] env {lr} adamw dir {point}" in text, (label, text)
        assert [e["event"] for e in point_events(run, label)][-1] == "finished"
        assert len([e for e in point_events(run, label) if e["event"] == "started"]) == len(jobs), label
    logs = cli(tmp_path, "logs", name).stdout  # every task's batch log and its point's node logs
    assert "argv ['--lr=3e-4', 'adamw']" in logs, logs
    assert re.search(r"==> task 1/stnode\d: .*/points/lr=3e-4_opt=adamw/logs/", logs), logs
    label = "lr=3e-4_opt=adamw"
    point = cli(tmp_path, "status", str(run / "points" / label))
    assert point.returncode == 0 and point.stdout.startswith(f"run        {label}"), point.stdout
    assert f"sweep      point {label} (task 1) of sweep {name}: lr=3e-4 opt=adamw" in point.stdout, point.stdout
    assert "COMPLETED" in point.stdout and "2 points" not in point.stdout, point.stdout
    point_logs = cli(tmp_path, "logs", str(run / "points" / label))
    assert point_logs.returncode == 0, point_logs.stderr
    assert f"==> task 1/batch: {run / 'logs' / f'job-{second}_1.out'} <==" in point_logs.stdout, point_logs.stdout
    assert "argv ['--lr=3e-4', 'adamw']" in point_logs.stdout and "--lr=1e-4" not in point_logs.stdout


def test_bad_sweeps_are_refused_naming_the_key_and_nothing_is_queued(tmp_path):
    assert cli(tmp_path, "demo-corpus", "--max-mb", "0.1").returncode == 0
    for sweep, words in ((["--sweep", "train.lrr=1e-4,3e-4"], "train.lrr: unknown key"),
                         (["--sweep", "train.lr=fast,1e-4"], "--sweep train.lr=fast: train.lr: expected a number"),
                         (["--sweep", "train.lr="], "train.lr: no values"),
                         (["--sweep", "train.steps=" + ",".join(str(i) for i in range(1, 1100))],
                          "more than the cluster's MaxArraySize")):
        proc = cli(tmp_path, "submit", "--profile", "local", "--recipe", "tiny-demo", *sweep)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and words in lines[0], proc.stderr
    proc = cli(tmp_path, "submit", "--profile", "local", "--sweep", "lr=1,2", "--", "echo", "{rate}")
    assert proc.returncode == 2 and "{rate}" in proc.stderr and "the keys are lr" in proc.stderr, proc.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


@pytest.mark.torch
@pytest.mark.slow
def test_two_learning_rates_in_one_array_one_preempted_resumes_bitwise(tmp_path):
    sys.path.insert(0, str(REPO / "tests" / "survival"))
    from survival_util import Reference
    sys.path.insert(0, str(REPO / "tests" / "e2e"))
    from test_e2e_trainer import short_recipe

    assert cli(tmp_path, "demo-corpus", "--max-mb", "0.3").returncode == 0
    recipe = short_recipe(tmp_path / "short.toml", steps=60, paced=True)  # long enough to be preempted in
    reference = Reference(tmp_path, [sys.executable, "-m", "slurmtrain.train", "--recipe", str(recipe),
                                     "--set", "train.lr=3e-3"], "reference")
    # A whole node per task (exclusive): preempting one node stops one task. The srun launcher:
    # no torchrun agent to import torch once more for each of the three starts.
    name = submit(tmp_path, "--profile", "local", "--launcher", "srun", "-N", "1", "--set", "launch.procs_per_node=2",
                  "--set", "slurm.exclusive=true", "--partition", "low", *PORTS, "--name", "lrs",
                  "--sweep", "train.lr=1e-3,3e-3", "--recipe", str(recipe))
    run = tmp_path / "runs" / name
    wait_for_file(tmp_path, name, "a checkpoint of point lr=3e-3",
                  lambda: any(e["event"] == "checkpoint_saved" for e in point_events(run, "lr=3e-3")))
    task = statuses(tmp_path, [name])[name]["tasks"][1]
    assert task["state"] == "RUNNING" and task["nodelist"], task
    subprocess.run(["sbatch", "-p", "high", "-w", task["nodelist"], "-N", "1", "--ntasks-per-node=4", "-J",
                    "preemptor", "-o", "/dev/null", "--wrap", "sleep 5"], check=True, capture_output=True, timeout=60)
    final = wait_final(tmp_path, [name], timeout=400)[name]
    assert final["state"] == "COMPLETED", final
    assert [(r["values"]["train.lr"], r["state"], r["step"]) for r in final["sweep"]] == [
        ("1e-3", "COMPLETED", 60), ("3e-3", "COMPLETED", 60)], final["sweep"]
    stops = {label: [e["event"] for e in point_events(run, label) if e["event"] in ("preempted", "requeue", "resumed")]
             for label in ("lr=1e-3", "lr=3e-3")}
    assert stops["lr=1e-3"] == [] and "resumed" in stops["lr=3e-3"], stops
    reference.assert_same_weights(run / "points" / "lr=3e-3")

    text = cli(tmp_path, "status", name).stdout
    assert re.search(r"sweep\s+2 points: 2 COMPLETED", text), text
    assert re.search(r"1\s+3e-3\s+COMPLETED\s+60/60\s+\d", text), text
    assert "2 points: 2 COMPLETED" in cli(tmp_path, "runs").stdout
    [listed] = [json.loads(line) for line in cli(tmp_path, "runs", "--json").stdout.splitlines()]
    assert [(r["label"], r["state"], r["step"]) for r in listed["sweep"]] == [
        ("lr=1e-3", "COMPLETED", 60), ("lr=3e-3", "COMPLETED", 60)], listed["sweep"]
    plot = cli(tmp_path, "plot", name, "--output", str(tmp_path / "sweep.png"))
    assert plot.returncode == 0 and plot.stdout.strip().endswith("lr=1e-3; lr=3e-3"), plot.stdout
    assert (tmp_path / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
