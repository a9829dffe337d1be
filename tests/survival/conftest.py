"""Fixtures of the survival tests; the helpers are in survival_util.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from survival_util import cancel, run_cli


@pytest.fixture(scope="session")
def workdir(tmp_path_factory) -> Path:
    """The directory jobs are submitted from, with the demo corpus tiny-demo reads."""
    d = tmp_path_factory.mktemp("survival")
    run_cli(["demo-corpus", "--max-mb", "0.5"], cwd=d)
    return d


@pytest.fixture
def runs_dir(workdir: Path, request) -> Path:
    d = workdir / "runs" / request.node.name
    d.mkdir(parents=True)
    yield d
    for run in d.iterdir():  # never leave a job of a failed test behind
        job_ids = json.loads((run / "manifest.json").read_text()).get("job_ids", []) \
            if (run / "manifest.json").is_file() else []
        for job_id in job_ids:
            cancel(job_id)
