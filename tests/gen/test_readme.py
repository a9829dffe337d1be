"""README.md shows the rendered aws-p4d script whole: it must be what gen prints."""

from __future__ import annotations

import re
from pathlib import Path

from slurmtrain.profile import load_profile
from slurmtrain.render import JobSpec, render

REPO = Path(__file__).resolve().parents[2]
README_PYTHON = "/fsx/venv/bin/python"  # the interpreter the README's reader ran gen with
JOB = JobSpec(command=("python", "train.py"), job_name="train", python=README_PYTHON,
              regen_command="slurmtrain gen --profile aws-p4d --nodes 4 -- python train.py")


def readme_script() -> str:
    text = (REPO / "README.md").read_text()
    m = re.search(r"<!-- job-script:start[^\n]*\n```bash\n(.*?)```\n<!-- job-script:end -->", text, re.S)
    assert m, "README.md has no job-script block"
    return m.group(1)


def rendered() -> str:
    return render(load_profile("aws-p4d", ["slurm.nodes=4"]), JOB)


def test_the_readme_shows_the_aws_p4d_script_as_gen_prints_it():
    assert readme_script() == rendered(), (
        "README.md's job script differs from what gen prints; update it with: python scripts/regen_golden.py")


def test_the_aws_p4d_script_is_short():
    script = rendered()
    assert len(script.splitlines()) <= 100
    assert f"{len(script.splitlines())} lines" in (REPO / "README.md").read_text()
    for word in ("awk", "sed ", "json", "trap 'on_stop"):
        assert word not in script.lower(), word
