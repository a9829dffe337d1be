"""The TERM trap's look-up of why SIGTERM came (time limit, node failure, cancel) runs in
Slurm's KillWait before SIGKILL: a slow or hung controller must not eat that window."""

from __future__ import annotations

import os
import time

import pytest

from script_functions import run_bash


@pytest.mark.slow  # two 5 s bounds run out
def test_term_cause_is_bounded_when_the_controller_hangs(tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    for tool in ("scontrol", "squeue"):
        (fake / tool).write_text("#!/bin/sh\nexec sleep 300\n")
        os.chmod(fake / tool, 0o755)
    began = time.monotonic()
    proc = run_bash(["term_cause"], 'JOB_END=2026-11-22T10:00:00; term_cause', tmp_path,
                    env={"PATH": f"{fake}:/usr/bin:/bin", "SLURM_JOB_ID": "7"})
    took = time.monotonic() - began
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.decode().strip() == "cancel"  # nothing learnt: not a time limit, not a requeue
    assert took < 20, f"term_cause took {took:.0f} s with a hung controller"
