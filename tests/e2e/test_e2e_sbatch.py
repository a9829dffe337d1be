"""sbatch itself: every rendered local script is accepted (--test-only), and refusals
reach the user as Slurm's own one-line message, recorded in the run directory."""

from __future__ import annotations

import json
import subprocess

import pytest

import waiting
from e2e_util import cli, wait_final

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


def test_a_script_given_to_sbatch_by_hand_is_a_run_the_commands_know(tmp_path):
    """README's first lines: `gen > job.sbatch; sbatch job.sbatch`. Its run directory is found
    by `runs`, `status` (from anywhere), `logs`; `resubmit` submits it again into the same run."""
    gen = cli(tmp_path, "gen", "--profile", "local", "--nodes", "1", "--name", "byhand", "--",
              "python3", "-c", "print('hello from the node')")
    assert gen.returncode == 0, gen.stderr
    (tmp_path / "job.sbatch").write_text(gen.stdout)
    job_id = subprocess.run(["sbatch", "--parsable", "job.sbatch"], cwd=tmp_path, capture_output=True, text=True,
                            timeout=60, check=True).stdout.strip()
    run = tmp_path / "runs" / f"byhand-{job_id}"
    waiting.wait_for("the job's run directory", lambda: (run / "manifest.json").is_file(),
                     lambda: subprocess.run(["squeue", "-h", "-j", job_id], capture_output=True, text=True,
                                            timeout=30).stdout, poll=1)
    wait_final(tmp_path, [run.name], timeout=120)
    manifest = json.loads((run / "manifest.json").read_text())
    assert (manifest["submitted_by"], manifest["job_ids"], manifest["submit_cwd"]) == ("sbatch", [job_id], str(tmp_path))
    assert (run / "job.sbatch").read_text() == gen.stdout  # as Slurm kept it: what resubmit gives sbatch again
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    status = cli(elsewhere, "status", job_id)
    assert status.returncode == 0 and "completed: the command finished (exit 0)" in status.stdout, status.stdout
    assert f"submitted as job {job_id} (with sbatch" in status.stdout
    assert run.name in cli(tmp_path, "runs").stdout
    logs = cli(tmp_path, "logs", run.name).stdout
    assert f"slurm-byhand-{job_id}.out" in logs and "hello from the node" in logs
    again = cli(elsewhere, "resubmit", "--force", job_id)
    assert again.returncode == 0, again.stderr
    second = again.stdout.split("as job ")[1].split()[0]
    final = wait_final(tmp_path, [run.name], timeout=120)[run.name]
    assert (final["job_id"], final["state"]) == (second, "COMPLETED"), final
    assert (run / "logs" / f"job-{second}.out").is_file() and not (tmp_path / "runs" / f"byhand-{second}").exists()
