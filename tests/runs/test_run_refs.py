"""One vocabulary for a run: every command that takes RUN accepts a run directory (a
path), a run name, a unique prefix of one, a job id or a job name, resolved by one
function (slurmtrain.runs.rundir.resolve). Slurm is faked; runs are built on disk."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from slurmtrain import events
from slurmtrain.cli import main
from slurmtrain.runs import rundir

JOB = "4242"
SCONTROL = f"JobId={JOB} JobState=RUNNING Requeue=1 Restarts=0 NumNodes=2 RunTime=00:01:00 ExitCode=0:0"


@pytest.fixture
def run(tmp_path, monkeypatch, fake_slurm):
    """runs/demo-<stamp>/ holding what submit and the trainer leave, with tmp_path as cwd."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SLURMTRAIN_RUNS_DIR", raising=False)
    fake_slurm(scontrol=SCONTROL, sacct=None)
    other = rundir.create("runs", "other")  # so that a prefix has to be unique to count
    other.update_manifest(name=other.name, job_name="other", job_ids=["17"], state="submitted",
                          submitted_at="2025-01-01T00:00:00")
    run = rundir.create("runs", "demo")
    run.update_manifest(name=run.name, job_name="demo", job_ids=[JOB], state="submitted",
                        submitted_at="2025-01-01T00:00:01")
    run.script.write_text("#!/bin/bash\n")
    (run.logs / f"job-{JOB}.out").write_text("batch says hi\n")
    with (run.path / "metrics.jsonl").open("w") as fh:
        for s in range(1, 4):
            fh.write(json.dumps({"step": s, "total_steps": 10, "loss": 3.0 - s / 10, "lr": 1e-3,
                                 "tokens_per_s": 100.0, "step_time": 1.0}) + "\n")
    events.append(run.path, "started", job_id=JOB, restart=0, nodes="stnode1 stnode2")
    return run


FORMS = {
    "absolute path": lambda run: str(run.path),
    "relative path": lambda run: f"runs/{run.name}",
    "run name": lambda run: run.name,
    "unique prefix": lambda run: "dem",
    "job id": lambda run: JOB,
    "job name": lambda run: "demo",
}


def _export_stops_at_the_reader(monkeypatch):
    """export resolves RUN, then reads its checkpoint: stop there, saying which run it got."""
    from slurmtrain.cli import trainer
    from slurmtrain.errors import UsageError

    def reader():
        def load_consolidated(run_dir):
            raise UsageError(f"would read {run_dir}")
        return load_consolidated
    monkeypatch.setattr(trainer, "_load_consolidated", reader)


COMMANDS = {  # args after RUN, and what the output must show for the resolved run
    "status": ([], lambda run: f"run        {run.name}", 0),
    "logs": ([], lambda run: "batch says hi", 0),
    "watch": (["--once"], lambda run: "step 3/10", 0),
    "plot": (["-o", "m.png"], lambda run: "wrote m.png", 0),
    "export": (["--hf", "hf"], lambda run: f"would read {run.path}", 2),
    "resubmit": ([], lambda run: f"run {run.name}: job {JOB} is still RUNNING", 2),
    "cancel": ([], lambda run: f"cancelled job {JOB} ({run.name})", 0),
}


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("command", COMMANDS)
def test_every_run_command_accepts_every_form(run, form, command, monkeypatch):
    if command == "plot":
        pytest.importorskip("matplotlib")
    if command == "export":
        pytest.importorskip("torch")
        _export_stops_at_the_reader(monkeypatch)
    args, shows, code = COMMANDS[command]
    ref = FORMS[form](run)
    result = CliRunner().invoke(main, [command, ref, *args])
    assert result.exit_code == code, result.output
    assert shows(run) in result.output, result.output


@pytest.mark.parametrize("command", ["watch", "plot", "export", "status", "logs", "cancel", "resubmit"])
def test_runs_dir_option_and_unknown_run(run, tmp_path, command):
    """--runs-dir works for every run command, and an unknown RUN says where it looked."""
    required = {"plot": ["-o", "m.png"], "export": ["--hf", "hf"]}.get(command, [])
    result = CliRunner().invoke(main, [command, "nothing-like-this", "--runs-dir", "runs", *required])
    assert result.exit_code == 2
    assert "run 'nothing-like-this'" in result.output and "runs" in result.output
    result = CliRunner().invoke(main, [command, "./no/such/dir", "--runs-dir", "runs", *required])
    assert result.exit_code == 2 and "./no/such/dir: no such run directory" in result.output


def test_trainer_run_directory_without_a_manifest(tmp_path, monkeypatch):
    """`python -m slurmtrain.train` alone leaves runs/train-<recipe>/ with metrics but no
    manifest: watch takes it by path and by name under --runs-dir."""
    monkeypatch.chdir(tmp_path)
    plain = tmp_path / "runs" / "train-tiny"
    plain.mkdir(parents=True)
    (plain / "metrics.jsonl").write_text(json.dumps({"step": 2, "total_steps": 4, "loss": 1.0}) + "\n")
    for ref in (str(plain), "runs/train-tiny", "train-tiny"):
        result = CliRunner().invoke(main, ["watch", ref, "--once"])
        assert result.exit_code == 0 and "step 2/4" in result.output, (ref, result.output)
