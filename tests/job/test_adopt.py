"""A job script given to sbatch by hand writes the manifest `slurmtrain submit` would have
(job/adopt.py): once, from Slurm's view of the job, with the script as Slurm keeps it."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from slurmtrain import events
from slurmtrain.job.adopt import adopt
from slurmtrain.job.config import Job
from slurmtrain.job.slurm import Answer, Slurm

SHOWN = ("JobId=42 JobName=byhand SubmitTime=2026-11-27T21:18:30 Partition=debug NumNodes=2-2 "
         "WorkDir=/home/u/proj\n")


def _slurm(calls: list[list[str]], script_ok: bool = True) -> Slurm:
    def run(argv: list[str], timeout: float) -> Answer:
        calls.append(argv)
        if argv[:3] == ["scontrol", "-o", "show"]:
            return Answer(0, SHOWN)
        if argv[:3] == ["scontrol", "write", "batch_script"] and script_ok:
            Path(argv[4]).write_text("#!/bin/bash\n#SBATCH --nodes=2\n")
            return Answer(0, f"batch script for job {argv[3]} written to {argv[4]}\n")
        return Answer(1, "", "scontrol: error: Invalid job id specified")
    return Slurm("42", run)


def test_the_first_start_writes_the_manifest_the_script_and_the_submission(tmp_path):
    tmp_path = tmp_path / "byhand-42"  # the run directory gen's script names: <job name>-<job id>
    tmp_path.mkdir()
    calls: list[list[str]] = []
    env = {"SLURM_JOB_NAME": "byhand", "SLURM_SUBMIT_DIR": "/home/u/proj", "SLURM_JOB_NUM_NODES": "2"}
    job = Job("42", "42", "42", 0, "n[1-2]")
    assert adopt(tmp_path, job, _slurm(calls), Path("/home/u/proj/slurm-byhand-42.out"), env)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert (manifest["submitted_by"], manifest["job_ids"], manifest["nodes"], manifest["partition"]) == \
        ("sbatch", ["42"], 2, "debug")
    assert manifest["batch_logs"] == {"42": "/home/u/proj/slurm-byhand-42.out"}
    assert manifest["submit_cwd"] == "/home/u/proj" and (tmp_path / "job.sbatch").read_text().startswith("#!")
    (submitted,) = events.read(tmp_path)
    assert submitted["event"] == "submitted" and submitted["by"] == "sbatch"
    assert submitted["time"] == datetime.fromisoformat("2026-11-27T21:18:30").timestamp()
    # A later start (a requeue), or a run `slurmtrain submit` made: nothing written again.
    assert not adopt(tmp_path, job, _slurm(calls), None, env)
    assert len(events.read(tmp_path)) == 1


def test_no_script_from_slurm_leaves_none_and_an_array_task_is_left_alone(tmp_path):
    calls: list[list[str]] = []
    run = tmp_path / "x-42"
    run.mkdir()
    assert adopt(run, Job("42", "42", "42", 0, "n1"), _slurm(calls, script_ok=False), None, {})
    assert not (run / "job.sbatch").exists()
    assert not adopt(tmp_path, Job("42", "42", "42", 0, "n1"), _slurm(calls), None, {})  # not its own name
    task = tmp_path / "task"
    task.mkdir()
    assert not adopt(task, Job("43", "40_3", "40_3", 0, "n1", "40", 3, 4), _slurm(calls), None, {})
    assert not (task / "manifest.json").exists()
