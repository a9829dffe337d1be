"""sbatch itself: every rendered local script is accepted (--test-only), and refusals
reach the user as Slurm's own one-line message, recorded in the run directory."""

from __future__ import annotations

import json
import subprocess

import pytest

from e2e_util import cli

pytestmark = pytest.mark.slurm


@pytest.mark.parametrize("launcher", ["torchrun", "srun-loop", "deepspeed"])
@pytest.mark.parametrize("job", [["--", "python", "train.py", "--lr", "3e-4"], ["--recipe", "tiny-demo"]])
def test_sbatch_test_only_accepts_gen_output(tmp_path, launcher, job):
    if "--recipe" in job:  # gen checks the recipe's corpus where the job will start
        made = cli(tmp_path, "demo-corpus", "--max-mb", "0.1")
        assert made.returncode == 0, made.stderr
    gen = cli(tmp_path, "gen", "--profile", "local", "--launcher", launcher, *job)
    assert gen.returncode == 0, gen.stderr
    script = tmp_path / "job.sbatch"
    script.write_text(gen.stdout)
    proc = subprocess.run(["sbatch", "--test-only", str(script)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "to start at" in proc.stderr  # "sbatch: Job 12 to start at ... using 4 processors on nodes ..."


@pytest.mark.parametrize("args, slurm_says", [
    (["--partition", "nope"], "invalid partition"),
    (["--nodes", "5"], "more processors requested than permitted"),  # EnforcePartLimits=ALL
])
def test_refusal(tmp_path, args, slurm_says):
    (tmp_path / "x.py").write_text("")
    proc = cli(tmp_path, "submit", *args, "--name", "refused", "--", "python", "x.py")
    if proc.returncode == 0:
        subprocess.run(["scancel", "--name", "refused"], timeout=30)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("slurmtrain: error: sbatch refused the job: sbatch: error: ")
    assert slurm_says in lines[0].lower()
    (run,) = (tmp_path / "runs").iterdir()
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["state"] == "refused" and slurm_says in manifest["refusal"].lower()
    assert manifest["job_ids"] == []
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events] == ["submit_refused"]
    status = cli(tmp_path, "status", "refused")
    assert "REFUSED" in status.stdout
