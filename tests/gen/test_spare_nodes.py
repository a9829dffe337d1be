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
