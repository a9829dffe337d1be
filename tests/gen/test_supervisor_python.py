"""The script names the Python that supervises the job and checks it first: one that
cannot import slurmtrain ends the job at once with one line saying what to do."""

from __future__ import annotations

import os
import subprocess
import sys

from slurmtrain.profile import load_profile
from slurmtrain.render import JobSpec, render


def run(tmp_path, sets: list[str], job: JobSpec) -> subprocess.CompletedProcess:
    script = tmp_path / "job.sbatch"
    script.write_text(render(load_profile("local", sets), job))
    env = {**os.environ, "SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "n1", "SLURM_SUBMIT_DIR": str(tmp_path),
           "SLURM_JOB_NAME": "t"}
    return subprocess.run(["bash", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)


def test_a_python_without_slurmtrain_ends_the_job_with_one_line(tmp_path):
    proc = run(tmp_path, ['launch.supervisor_python="/usr/bin/env"'], JobSpec(command=("python3", "x.py")))
    assert proc.returncode == 1
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("slurmtrain: error: /usr/bin/env on ") and "cannot import slurmtrain" in line
    assert "launch.supervisor_python" in line and "slurmtrain gen --plain" in line
    assert not (tmp_path / "runs" / "t-42" / "events.jsonl").exists()  # nothing was started


def test_the_interpreter_that_ran_gen_supervises_by_default():
    script = render(load_profile("local"), JobSpec(command=("python3", "x.py")))
    assert f"PYTHON={sys.executable}\n" in script
    named = render(load_profile("local", ['launch.supervisor_python="/shared/venv/bin/python"',
                                          'launch.python="/opt/other/python"']), JobSpec(command=("python3", "x.py")))
    assert "PYTHON=/shared/venv/bin/python\n" in named  # not launch.python: that one runs the launcher
