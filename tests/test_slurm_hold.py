"""The Slurm lane's releaser of requeued jobs (tests/slurm_hold.py): which jobs it picks
from squeue's answer, and that it releases only those held long enough. squeue and
scontrol are stand-ins on PATH here (a parsing test); the Slurm tests use the real ones."""

from __future__ import annotations

import os
import time

import slurm_hold


def _fake(tmp_path, monkeypatch, squeue_lines: list[str]) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "squeue").write_text("#!/bin/sh\ncat <<'EOF'\n" + "\n".join(squeue_lines) + "\nEOF\n")
    (bin_dir / "scontrol").write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path / 'scontrol.log'}\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


def _stamp(seconds_ago: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - seconds_ago))


def test_only_jobs_on_the_begintime_hold_are_listed(tmp_path, monkeypatch):
    _fake(tmp_path, monkeypatch, [f"11|BeginTime|{_stamp(30)}", f"12|Resources|{_stamp(30)}",
                                  f"13|Priority|{_stamp(1)}", "garbage line", "14|BeginTime|N/A"])
    assert [job for job, _ in slurm_hold.held()] == ["11"]


def test_a_job_is_released_only_after_the_credential_delay(tmp_path, monkeypatch):
    _fake(tmp_path, monkeypatch, [f"21|BeginTime|{_stamp(slurm_hold.RELEASE_AFTER_S + 20)}",
                                  f"22|BeginTime|{_stamp(0)}"])
    assert slurm_hold.release_due() == ["21"]
    assert (tmp_path / "scontrol.log").read_text().split() == ["update", "JobId=21", "StartTime=now"]


def test_each_sandbox_is_asked_through_its_own_slurm_conf(tmp_path, monkeypatch):
    """Two Slurm lanes, two sandboxes: a releaser asks and releases only through its own."""
    _fake(tmp_path, monkeypatch, [])
    stamp = _stamp(slurm_hold.RELEASE_AFTER_S + 20)
    (tmp_path / "bin" / "squeue").write_text(
        f'#!/bin/sh\n[ "$SLURM_CONF" = /lane2/slurm.conf ] && echo "1001|BeginTime|{stamp}"\nexit 0\n')
    (tmp_path / "bin" / "scontrol").write_text(
        f'#!/bin/sh\necho "$SLURM_CONF $*" >> {tmp_path / "scontrol.log"}\n')
    monkeypatch.setenv("SLURM_CONF", "/lane1/slurm.conf")
    assert slurm_hold.release_due() == []
    assert slurm_hold.release_due("/lane2/slurm.conf") == ["1001"]
    assert (tmp_path / "scontrol.log").read_text().split() == [
        "/lane2/slurm.conf", "update", "JobId=1001", "StartTime=now"]
