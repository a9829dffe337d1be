"""Unit tests of slurmtrain.runs: Slurm faked at the subprocess boundary, no sandbox."""

from __future__ import annotations

import pytest

from runs_fakes import FakeSlurm
from slurmtrain.runs import slurmquery


@pytest.fixture
def fake_slurm(monkeypatch):
    def install(scontrol: str = "", sacct: str | None = None) -> FakeSlurm:
        fake = FakeSlurm(scontrol, sacct)
        monkeypatch.setattr(slurmquery.subprocess, "run", fake)
        monkeypatch.setattr(slurmquery, "_accounting", {})
        return fake
    return install


@pytest.fixture(autouse=True)
def fresh_watcher(monkeypatch):
    """submitit's watcher is a class attribute: give each test its own."""
    from slurmtrain.runs import jobs

    monkeypatch.setattr(jobs.TrackedJob, "watcher", jobs.Watcher())
