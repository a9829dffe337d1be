"""Users' own workflows inside the image, submitted by an ordinary user: a Hugging Face
Trainer script preempted and resumed, the FMEngine guide's Slurm workflow (a per-node srun
loop of apptainer, the workspace bound at /workspace, DeepSpeed pipeline stages from
./configs/llama.json, W&B offline) as far as it runs on CPU, and `doctor`."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

from container_util import owned_by_root, profile_text
from readback import wandb_history
from slurmtrain.runs import classify
from survival_util import (HERE, describe, hf_steps, named, run_cli, submit, take_all_nodes, wait_job_gone,
                           wait_until)

pytestmark = pytest.mark.container

REPO = Path(__file__).resolve().parents[2]
HF_STEPS = 60


def test_a_hugging_face_trainer_script_in_the_image_survives_a_preemption(workdir: Path):
    cache = workdir / "hf-cache"  # the parent profile's HF_HOME=/.hf_cache, bound as sites do
    cache.mkdir()
    profile = workdir / "hf.toml"
    profile.write_text(profile_text([f"{cache}:/.hf_cache"], "torchrun"))
    out = workdir / "hf-output"
    run, job = submit(workdir / "runs-hf", workdir, ["--profile", str(profile)],
                      ["python", str(HERE / "hf_clm.py"), "--output-dir", str(out), "--max-steps", str(HF_STEPS),
                       "--save-steps", "1000", "--step-seconds", "0.3"])
    wait_until(run, "the Trainer stepping", lambda: len(hf_steps(run)) >= 5, 300, job)
    take_all_nodes(5)  # preempts it (partition low)
    assert wait_job_gone(job, run, 400) == "COMPLETED", describe(run)
    assert [o.kind for o in classify.ends(run)] == [classify.PREEMPTED, classify.COMPLETED], describe(run)
    stopped, resumed = named(run, "stopped"), named(run, "resumed")
    assert len(stopped) == len(resumed) == 1, describe(run)
    assert resumed[0]["step"] == stopped[0]["step"] < HF_STEPS, describe(run)  # on from the stop's checkpoint
    counts = Counter(r["step"] for r in hf_steps(run))
    assert sorted(counts) == list(range(1, HF_STEPS + 1)) and set(counts.values()) == {1}, describe(run)
    assert (out / f"checkpoint-{HF_STEPS}" / "trainer_state.json").exists()
    assert owned_by_root(run) == [] and owned_by_root(out) == []


FM_STEPS = 20


def test_the_fmengine_workflow_runs_in_the_image(workdir: Path):
    """The guide's script, bound as it binds: home at its own path, the HF cache, the
    datasets and the workspace (the submit directory) at /workspace, the working directory
    there; its trainer arguments as it writes them (here the built-in trainer's, which take
    FMEngine's names)."""
    home = Path.home()
    workspace = workdir / "fm-workspace"
    (workspace / "configs").mkdir(parents=True)
    shutil.copy(REPO / "configs" / "deepspeed" / "pipeline.json", workspace / "configs" / "llama.json")
    datasets, cache = workdir / "fm-datasets", workdir / "fm-cache"
    datasets.mkdir()
    cache.mkdir()
    shutil.copy(workdir / "demo" / "corpus.jsonl", datasets / "prompt.jsonl")
    profile = workdir / "fmengine.toml"
    profile.write_text(profile_text(
        [f"{cache}:/.hf_cache", f"{datasets}:/datasets", f"{workspace}:/workspace"], "srun-loop",
        container=f'home = "{home}:{home}"\nworkdir = "/workspace"',
        extra='\n[tracking]\nwandb = true\nmode = "offline"\n', pythonpath="/workspace"))
    run, job = submit(workdir / "runs-fm", workspace, ["--profile", str(profile)], [
        "python", "-m", "slurmtrain.train", "--recipe", "tiny-demo", "--data_path", "/datasets/prompt.jsonl",
        "--max_seq_len", "64", "--train_steps", str(FM_STEPS), "--eval_steps", "10", "--save_steps", "10",
        "--log_steps", "1", "--pipe_parallel_size", "2", "--model_parallel_size", "1",
        "--deepspeed_config", "./configs/llama.json"])
    assert wait_job_gone(job, run, 400) == "COMPLETED", describe(run)
    assert named(run, "finished")[0]["step"] == FM_STEPS, describe(run)
    assert sorted(p.name for p in (run / "checkpoints").glob("step_*")) == ["step_10", "step_20"]
    log = "".join(p.read_text() for p in (run / "logs").glob("*.out"))
    assert "engine: DeepSpeed" in log and "config configs/llama.json" in log, log[-3000:]
    assert any((run / "checkpoints" / "step_20").rglob("layer_*-model_states.pt")), "not DeepSpeed's pipeline"
    folders = sorted((run / "wandb").glob("offline-run-*"))
    assert len(folders) == 1, folders
    _, rows = wandb_history(folders)
    assert [r["_step"] for r in rows] == list(range(1, FM_STEPS + 1)), rows
    assert owned_by_root(run) == [] and owned_by_root(workspace) == []


def test_doctor_runs_as_the_user_with_its_checks_in_the_image(workdir: Path):
    """Every check of `doctor`, on both nodes, inside the image, submitted by the user."""
    profile = workdir / "doctor.toml"
    profile.write_text(profile_text([], "srun-loop"))
    runs = workdir / "runs-doctor"
    proc = run_cli(["doctor", "--profile", str(profile), "--runs-dir", str(runs), "-N", "2", "--seconds", "1"],
                   cwd=workdir, check=False, timeout=400)
    assert proc.returncode == 0 and "doctor: every check passed" in proc.stdout, proc.stdout + proc.stderr
    [report] = runs.glob("doctor-*/doctor.json")
    rows = json.loads(report.read_text())["rows"]
    assert {r["node"] for r in rows} - {"(slurm)"} == {"stnode1", "stnode2"}, rows
    assert {r["check"] for r in rows} >= {"setup", "versions", "rundir", "allreduce", "slurm"}, rows
    assert owned_by_root(runs) == []
