"""A wheel built from the repository, installed into a fresh venv outside the checkout,
renders every built-in profile: templates and configs ship inside the package."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILTINS = ["aws-g5", "aws-p4d", "aws-p5", "hpc-apptainer", "lambda-a6000", "local"]


@pytest.mark.slow
def test_wheel_in_fresh_venv_renders_every_builtin(tmp_path):
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(wheels), str(REPO)], check=True, cwd=tmp_path, timeout=300)
    (wheel,) = wheels.glob("slurmtrain-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    # Dependencies come from the package index (click, jinja2, submitit: small, no torch).
    # Without PYTHONPATH: a checkout on it (with the egg-info `pip wheel` leaves) would make
    # pip take slurmtrain as installed already.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    subprocess.run([str(py), "-m", "pip", "install", "-q", str(wheel)], check=True, cwd=tmp_path, timeout=600,
                   env=env)
    away = tmp_path / "elsewhere"
    away.mkdir()
    where = subprocess.run([str(py), "-c", "import slurmtrain; print(slurmtrain.__file__)"], cwd=away, env=env,
                           capture_output=True, text=True, check=True).stdout
    assert str(venv) in where, where
    exe = venv / "bin" / "slurmtrain"
    for profile in BUILTINS:
        result = subprocess.run([str(exe), "gen", "--profile", profile, "--", "python", "train.py"], cwd=away,
                                env=env, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith("#!/bin/bash") and "#SBATCH --nodes=" in result.stdout
    listing = subprocess.run([str(exe), "profiles", "list"], cwd=away, env=env, capture_output=True, text=True).stdout
    assert all(name in listing for name in BUILTINS) and str(REPO) not in listing


def test_every_package_directory_is_listed_in_setup_cfg():
    import configparser
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    listed = set(cfg["options"]["packages"].split())
    on_disk = {str(p.parent.relative_to(REPO)).replace("/", ".") for p in (REPO / "slurmtrain").rglob("*.py")
               if "__pycache__" not in p.parts}
    assert on_disk <= listed, f"add to setup.cfg [options] packages: {sorted(on_disk - listed)}"
