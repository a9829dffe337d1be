"""tests/conftest.py where Slurm cannot be had: skip with the reason, but fail under CI=true.

Runs pytest in a subprocess on a copy of the conftest whose availability check says no."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"
PRETEND = '''
import slurmtrain.sandbox as _sb
_sb.unavailable_reason = lambda accounting=False: "pretend: no Slurm here"
'''


@pytest.fixture
def project(tmp_path):
    (tmp_path / "conftest.py").write_text(CONFTEST.read_text() + PRETEND)
    (tmp_path / "lanes.py").write_text((CONFTEST.parent / "lanes.py").read_text())
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    slurm: needs Slurm\n")
    (tmp_path / "test_x.py").write_text(
        "import pytest\n\n@pytest.mark.slurm\ndef test_needs_slurm():\n    pass\n\n"
        "def test_plain():\n    pass\n")
    return tmp_path


def _pytest(project: Path, ci: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2]), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-m", "pytest", "-rs", "-p", "no:cacheprovider", str(project)],
                          capture_output=True, text=True, cwd=project, env=env, timeout=120)


def test_skips_with_the_reason_outside_ci(project):
    proc = _pytest(project, None)
    assert proc.returncode == 0, proc.stdout
    assert "1 passed, 1 skipped" in proc.stdout
    assert "pretend: no Slurm here" in proc.stdout


def test_fails_under_ci_true(project):
    proc = _pytest(project, "true")
    assert proc.returncode == 1, proc.stdout
    assert "1 failed, 1 passed" in proc.stdout or "1 passed, 1 error" in proc.stdout
    assert "needed under CI=true" in proc.stdout
