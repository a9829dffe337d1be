"""Tracking across a requeue on the sandbox (issue 15): the built-in trainer, W&B offline
and TensorBoard on, stopped once (the warning signal to the batch script, as at a time
limit: only this job is touched) and requeued; a plain user script calling ``wandb.init()``
with no arguments, requeued once. Both jobs run side by side; a W&B API key sentinel is in
the submitting environment throughout."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "survival"))
from survival_util import (cancel, describe, job_ended, job_field, named, release_requeued, run_cli,  # noqa: E402
                           slurm, submit, wait_until)

pytest.importorskip("wandb", reason="wandb is not installed on this machine (the [test] extra has it)")
pytest.importorskip("tensorboard", reason="tensorboard is not installed on this machine (the [test] extra has it)")
from readback import tensorboard_scalars, wandb_config, wandb_history  # noqa: E402

pytestmark = [pytest.mark.slurm, pytest.mark.torch]

SENTINEL = "sentinel-wandb-key-7f3c91d2"
STEPS = 24
# One node, one process each (the two jobs fit the sandbox side by side); ports from
# this test's range, fixed (no spread).
ONE_NODE = ["--set", "slurm.nodes=1", "--set", "launch.procs_per_node=1", "--set", "launch.rdzv_port_spread=0",
            "--set", "resilience.rendezvous_timeout=60"]
TRACK = ["--set", "tracking.wandb=true", "--set", "tracking.tensorboard=true", "--set", "tracking.project=st15"]

USER_SCRIPT = """\
import os, sys, time, wandb
run = wandb.init()  # no arguments: everything from the job's WANDB_* variables
with open(os.path.join(os.environ["SLURMTRAIN_RUN_DIR"], "user_ids"), "a") as fh:
    fh.write(f"{run.id} {os.environ.get('SLURM_RESTART_COUNT', '0')}\\n")
run.log({"start": int(os.environ.get("SLURM_RESTART_COUNT", "0"))})
run.finish()
if os.environ.get("SLURM_RESTART_COUNT", "0") == "0":
    time.sleep(600)  # the first start waits to be stopped (USR2, default action)
"""


def stop_once(job: str) -> None:
    """The warning signal to the batch script only, as Slurm sends it before a time limit."""
    slurm("scancel", "--batch", "--signal=USR2", job)


@pytest.fixture(scope="module")
def jobs(_sandbox_session, tmp_path_factory):
    work = tmp_path_factory.mktemp("tracking")
    run_cli(["demo-corpus", "--max-mb", "0.5"], cwd=work)
    (work / "user_wandb.py").write_text(USER_SCRIPT)
    runs_dir = work / "runs"
    old = os.environ.get("WANDB_API_KEY")
    os.environ["WANDB_API_KEY"] = SENTINEL  # the submitting environment holds the key
    submitted = []
    try:
        trainer, tjob = submit(runs_dir, work, ["--name", "track", *ONE_NODE, *TRACK,
                                                "--set", "launch.rdzv_port=29880"],
                               ["python3", "-m", "slurmtrain.train", "--recipe", "tiny-demo",
                                "--train-steps", str(STEPS), "--save-steps", "4", "--log-steps", "2",
                                "--eval-steps", "6"])
        submitted.append(tjob)
        user, ujob = submit(runs_dir, work, ["--name", "userwb", *ONE_NODE, *TRACK, "--launcher", "srun",
                                             "--set", "launch.rdzv_port=29881",
                                             "--set", "resilience.requeue_when=always"],
                            ["python3", str(work / "user_wandb.py")])
        submitted.append(ujob)
        # The trainer: stopped once it has saved a checkpoint and logged a few steps.
        wait_until(trainer, "the trainer's first checkpoint",
                   lambda: named(trainer, "checkpoint_saved") and (trainer / "metrics.jsonl").is_file(), 240, tjob)
        stop_once(tjob)
        # The user script: stopped once its first start has recorded its W&B id.
        wait_until(user, "the user script's first wandb.init()",
                   lambda: job_field(ujob, "JobState") == "RUNNING" and (user / "user_ids").is_file()
                   and (user / "user_ids").read_text().strip(), 240, ujob)
        stop_once(ujob)
        wait_until(trainer, "the trainer's requeue", lambda: named(trainer, "requeue"), 120, tjob)


        def both_ended():  # releases both requeued jobs (Slurm holds each about two minutes)
            release_requeued(ujob)
            return job_ended(tjob) and job_ended(ujob)
        wait_until(trainer, "both jobs to end", both_ended, 300, tjob)
        states = {"trainer": job_ended(tjob), "user": job_ended(ujob)}
        yield trainer, user, states
    finally:
        for job in submitted:
            cancel(job)
        if old is None:
            os.environ.pop("WANDB_API_KEY", None)
        else:
            os.environ["WANDB_API_KEY"] = old


def test_trainer_wandb_history_has_each_step_once_across_the_requeue(jobs):
    trainer, _, states = jobs
    assert states["trainer"] == "COMPLETED", describe(trainer)
    assert len(named(trainer, "started")) == 2 and named(trainer, "resumed"), describe(trainer)
    run_id = (trainer / "wandb-run-id").read_text().strip()
    folders = sorted((trainer / "wandb").glob(f"offline-run-*-{run_id}"))
    assert len(folders) == 2, f"one offline folder per start of run {run_id}: {folders}"
    assert not [p for p in (trainer / "wandb").glob("offline-run-*") if p not in folders], "another W&B run"
    ids, rows = wandb_history(folders)
    assert ids == {run_id}
    steps = [r["_step"] for r in rows]
    assert steps == list(range(2, STEPS + 1, 2)), steps  # each step once, in order, across the restart
    assert [r["_step"] for r in rows if "eval_loss" in r] == list(range(6, STEPS + 1, 6))
    assert all("loss" in r and "lr" in r and "tokens_per_s" in r for r in rows)
    config = wandb_config(folders)
    assert config["recipe"]["model"]["preset"] == "tiny", config.keys()
    manifest = config["manifest"]
    assert manifest["profile"]["digest"] and manifest["slurmtrain_version"] and manifest["nodelist"] in ("stnode1", "stnode2")
    assert config["profile"]["tracking"]["wandb"] is True


def test_trainer_tensorboard_events_have_each_step_once_across_the_requeue(jobs):
    trainer, _, states = jobs
    assert states["trainer"] == "COMPLETED", describe(trainer)
    assert len(list((trainer / "tensorboard").glob("events.out.tfevents.*"))) == 2  # one file per start
    assert tensorboard_scalars(trainer / "tensorboard", "loss") == list(range(2, STEPS + 1, 2))
    assert tensorboard_scalars(trainer / "tensorboard", "eval_loss") == list(range(6, STEPS + 1, 6))


def test_user_script_continues_the_same_wandb_run_after_a_requeue(jobs):
    _, user, states = jobs
    assert states["user"] == "COMPLETED", describe(user)
    starts = [line.split() for line in (user / "user_ids").read_text().splitlines()]
    run_id = (user / "wandb-run-id").read_text().strip()
    assert [s[1] for s in starts] == ["0", "1"], starts  # requeued once
    assert {s[0] for s in starts} == {run_id}, starts
    ids, rows = wandb_history(sorted((user / "wandb").glob(f"offline-run-*-{run_id}")))
    assert ids == {run_id} and [r["start"] for r in rows] == [0, 1]


def test_the_api_key_is_written_nowhere_in_the_run_directories(jobs):
    for run in jobs[:2]:
        assert (run / "wandb").is_dir()
        found = [str(p) for p in run.rglob("*") if p.is_file() and SENTINEL.encode() in p.read_bytes()]
        assert not found, f"the API key's value is in {found}"


def test_status_and_sync_show_the_offline_run(jobs):
    trainer = jobs[0]
    run_id = (trainer / "wandb-run-id").read_text().strip()
    out = run_cli(["status", str(trainer)], cwd=trainer.parent).stdout
    assert f"offline run {run_id} (project st15): 2 folder(s)" in out, out
    assert f"slurmtrain sync {trainer}" in out and f"wandb sync --id {run_id} -p st15" in out, out
    assert f"tensorboard --logdir {trainer / 'tensorboard'}" in out, out
    line = run_cli(["sync", "--dry-run", str(trainer)], cwd=trainer.parent).stdout.strip()
    assert line.startswith(f"wandb sync --id {run_id} -p st15 ") and line.count("offline-run-") == 2, line
