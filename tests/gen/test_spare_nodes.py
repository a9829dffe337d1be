"""slurm.spare_nodes: the job asks Slurm for the run's nodes and the spares, with --no-kill
(a node that dies must not end the job), and tells the supervisor how many to keep idle;
`gen --plain` has no supervisor to put a spare in a lost node's place, and says so."""

from __future__ import annotations

import subprocess
import sys

import pytest

from slurmtrain.errors import UsageError
from slurmtrain.job.__main__ import parse
from slurmtrain.profile import load_profile
from slurmtrain.render import JobSpec, render

JOB = JobSpec(command=("python3", "train.py"))


def test_spares_are_allocated_beyond_the_nodes_with_no_kill_and_passed_to_the_supervisor():
    script = render(load_profile("local", ["slurm.nodes=4", "slurm.spare_nodes=2"]), JOB)
    assert "#SBATCH --nodes=6\n" in script and "#SBATCH --no-kill\n" in script
    exec_line = script[script.index('exec "$PYTHON" -m slurmtrain.job'):].replace("\\\n", " ").splitlines()[0]
    args = exec_line.split("slurmtrain.job", 1)[1].split()  # what the supervisor parses
    assert parse(args).spare_nodes == 2


def test_without_spares_the_script_is_as_before():
    script = render(load_profile("local", ["slurm.nodes=4"]), JOB)
    assert "#SBATCH --nodes=4\n" in script and "--no-kill" not in script and "--spare-nodes" not in script


def test_plain_refuses_spares_naming_the_key():
    with pytest.raises(UsageError, match=r"slurm.spare_nodes = 1: spare nodes need the supervisor"):
        render(load_profile("local", ["slurm.spare_nodes=1"]), JobSpec(command=("python3", "train.py"), plain=True))


def test_a_negative_spare_count_is_a_profile_error_naming_the_key():
    proc = subprocess.run([sys.executable, "-m", "slurmtrain", "gen", "--profile", "local", "--set",
                           "slurm.spare_nodes=-1", "--", "python3", "train.py"], capture_output=True, text=True)
    assert proc.returncode == 2 and "slurm.spare_nodes" in proc.stderr and "Traceback" not in proc.stderr


def test_the_script_with_spares_is_shellcheck_clean(tmp_path):
    from test_golden import _shellcheck  # the goldens' own check and severity
    script = tmp_path / "job.sbatch"
    script.write_text(render(load_profile("aws-p4d", ["slurm.spare_nodes=1"]), JOB))
    result = subprocess.run([_shellcheck(), "--severity=style", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def _watch(script: str) -> str:
    start = script.index("slurmtrain_watch_supervisor() {")
    return script[start:script.index("\n}\n", start) + 3]


def test_with_spares_each_node_watches_the_supervisor_and_requeues_the_job_once_it_is_silent(tmp_path):
    """--no-kill keeps a job whose batch host died RUNNING on the other nodes (Slurm 22.05, the
    networked sandbox): each node's watch (its first task) requeues it once the supervisor's
    file is 120 s stale; a fresh file is left alone. The loop's 10 s made 0.1 s here."""
    script = render(load_profile("local", ["slurm.nodes=2", "slurm.spare_nodes=1"]), JOB)
    assert "slurmtrain_watch_supervisor </dev/null &" in script
    assert "slurmtrain_watch_supervisor" not in render(load_profile("local", ["slurm.nodes=2"]), JOB)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path}/asked\n")
    (bin_dir / "scontrol").chmod(0o755)
    watch = _watch(script).replace("sleep 10", "sleep 0.1")
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURMTRAIN_RUN_DIR": str(tmp_path), "SLURM_JOB_ID": "77"}
    alive = tmp_path / ".supervisor-77"
    alive.touch()
    fresh = subprocess.run(["bash", "-c", watch + "slurmtrain_watch_supervisor & sleep 0.5; kill $!"], env=env,
                           capture_output=True, text=True, timeout=30)
    assert not (tmp_path / "asked").exists(), fresh.stderr
    import os
    os.utime(alive, (0, os.path.getmtime(alive) - 121))
    stale = subprocess.run(["bash", "-c", watch + "slurmtrain_watch_supervisor"], env=env, capture_output=True,
                           text=True, timeout=30)
    assert (tmp_path / "asked").read_text() == "requeue 77\n", stale.stderr
    assert "no word from the job's supervisor for 12" in stale.stderr and "requeueing job 77" in stale.stderr
