"""The golden-file cases, shared by the test and by scripts/regen_golden.py."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from slurmtrain import resources
from slurmtrain.profile import load_profile
from slurmtrain.render import JobSpec, render

GOLDEN_DIR = Path(__file__).resolve().parent.parent / "golden"
REGEN = "python scripts/regen_golden.py"
BUILTINS = ["aws-g5", "aws-p4d", "aws-p5", "hpc-apptainer", "lambda-a6000", "local"]
JOB = JobSpec(command=("python", "train.py", "--config", "configs/llama2-7b.toml"),
              job_name="golden", regen_command="slurmtrain gen (golden test case)", python="/usr/bin/python3")
PLAIN = ["local", "aws-p4d"]  # gen --plain: these profiles' launchers


def cases() -> list[tuple[str, str]]:
    """(profile, launcher) for every built-in profile and each launcher it allows."""
    out = []
    for name in BUILTINS:
        for launcher in load_profile(name).profile.allowed_launchers:
            out.append((name, launcher))
            if name in PLAIN:
                out.append((name, f"{launcher}-plain"))
    return out


def render_case(profile: str, launcher: str) -> str:
    builtin = str(resources.clusters_dir() / f"{profile}.toml")
    plain = launcher.endswith("-plain")
    job = dataclasses.replace(JOB, plain=plain)
    return render(load_profile(builtin, [f'launch.launcher="{launcher.removesuffix("-plain")}"']), job)


def golden_path(profile: str, launcher: str) -> Path:
    return GOLDEN_DIR / f"{profile}-{launcher}.sbatch"
