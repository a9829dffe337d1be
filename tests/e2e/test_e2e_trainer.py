"""The built-in trainer on the sandbox: `slurmtrain submit --recipe` with no command,
2 nodes x 2 processes, ends COMPLETED and leaves metrics and checkpoints in its run
directory, and `slurmtrain watch --once` reads them."""

from __future__ import annotations

import json
import tomllib

import pytest

from e2e_util import cli, submit, wait_final
from slurmtrain import resources

pytestmark = pytest.mark.slurm


def short_recipe(path, steps: int = 12, paced: bool = False):
    """tiny-demo, shortened: a recipe file of the test's own, passed to --recipe by path.
    ``paced``: a quarter of the tokens a step (global batch 8 of 64 tokens), each step at
    least 0.3 s (room for a fault between steps, at a quarter of the CPU)."""
    text = (resources.recipes_dir() / "tiny-demo.toml").read_text()
    data = tomllib.loads(text)
    assert data["train"]["steps"] > steps and "debug" not in data
    if paced:
        text = text.replace(f"max_seq_len = {data['data']['max_seq_len']}", "max_seq_len = 64", 1)
        text = text.replace(f"global_batch_size = {data['train']['global_batch_size']}", "global_batch_size = 8", 1)
        text += "\n[debug]\nstep_seconds = 0.3\n"
    text = text.replace(f"steps = {data['train']['steps']}", f"steps = {steps}", 1)
    text = text.replace(f"save_steps = {data['train']['save_steps']}", "save_steps = 6", 1)
    text = text.replace(f"eval_steps = {data['train']['eval_steps']}", "eval_steps = 6", 1)
    text = text.replace(f"log_steps = {data['train']['log_steps']}", "log_steps = 2", 1)
    path.write_text(text)
    return path


def test_recipe_two_nodes_completes_with_metrics_and_checkpoints(tmp_path):
    assert cli(tmp_path, "demo-corpus", "--max-mb", "0.5").returncode == 0
    recipe = short_recipe(tmp_path / "short-demo.toml")
    name = submit(tmp_path, "--profile", "local", "--recipe", str(recipe), "--name", "demo")
    final = wait_final(tmp_path, [name], timeout=300)[name]
    run = tmp_path / "runs" / name
    logs = cli(tmp_path, "logs", name).stdout
    assert (final["state"], final["exit_code"]) == ("COMPLETED", 0), logs[-4000:]

    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train = [m for m in metrics if "loss" in m]
    assert [m["step"] for m in train] == [2, 4, 6, 8, 10, 12]
    assert any("eval_loss" in m for m in metrics)
    complete = sorted(p.parent.name for p in (run / "checkpoints").glob("step_*/COMPLETE"))
    assert complete == ["step_12", "step_6"]
    meta = json.loads((run / "checkpoints" / "step_12" / "train_meta.json").read_text())
    assert meta["world_size"] == 4  # 2 nodes x 2 processes in one process group
    kinds = [e["event"] for e in (json.loads(x) for x in (run / "events.jsonl").read_text().splitlines())]
    assert kinds[0] == "submitted" and "started" in kinds and kinds[-1] == "finished"

    watch = cli(tmp_path, "watch", str(run), "--once")
    assert watch.returncode == 0 and "12/12" in watch.stdout, watch.stdout + watch.stderr
