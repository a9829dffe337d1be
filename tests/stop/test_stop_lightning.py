"""slurmtrain.stop.lightning with a real Lightning Trainer on the CPU (tests/stop/lightning_train.py
in a subprocess): SIGTERM after batch 3 -- Lightning has a SIGTERM handler of its own that
the callback must override -- saves a stop checkpoint, reports it and exits 75; started
again, the script continues from step 3, skipping a newer checkpoint cut short."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from slurmtrain import events

pytest.importorskip("lightning")
pytestmark = pytest.mark.torch

REPO = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).resolve().parent / "lightning_train.py"
STOP_AT = 3


def _run(run_dir: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM") and k not in ("RANK", "WORLD_SIZE")}
    env.update(PYTHONPATH=str(REPO), SLURMTRAIN_RUN_DIR=str(run_dir),
               SLURMTRAIN_STOP_FILE=str(run_dir / ".stop-1"), SLURMTRAIN_STOP_SIGNAL="USR2")
    return subprocess.run([sys.executable, str(SCRIPT), "--root", str(run_dir / "out"), "--max-steps", "8", *args],
                          env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("lightning")
    return run_dir, _run(run_dir, "--signal-at", str(STOP_AT), "--signal", "TERM")


def test_lightning_sigterm_saves_reports_and_exits_75(stopped_run):
    run_dir, proc = stopped_run
    assert proc.returncode == 75, proc.stderr[-3000:]
    ckpts = run_dir / "out" / "checkpoints"
    stop_ckpt = ckpts / f"slurmtrain-stop-step={STOP_AT}.ckpt"
    assert sorted(p.name for p in ckpts.iterdir()) == ["epoch=0-step=2.ckpt", stop_ckpt.name]
    got = [(e["event"], e["step"], e.get("path")) for e in events.read(run_dir)]
    assert got == [("checkpoint_saved", 2, None),  # ModelCheckpoint's, reported after it was written
                   ("checkpoint_saved", STOP_AT, str(stop_ckpt)), ("stopped", STOP_AT, None)]


def test_lightning_resumes_from_the_newest_complete_checkpoint(stopped_run, tmp_path):
    run_dir, proc = stopped_run
    assert proc.returncode == 75, proc.stderr[-3000:]
    shutil.copytree(run_dir, tmp_path, dirs_exist_ok=True)
    ckpts = tmp_path / "out" / "checkpoints"
    cut = ckpts / "epoch=0-step=5.ckpt"  # newer, cut short by a kill mid-copy
    cut.write_bytes((ckpts / f"slurmtrain-stop-step={STOP_AT}.ckpt").read_bytes()[:500])

    proc = _run(tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"first_step": STOP_AT + 1, "global_step": 8}
    assert "skipping" in proc.stderr and cut.name in proc.stderr
    got = [(e["event"], e["step"]) for e in events.read(tmp_path)][3:]
    assert got == [("resumed", STOP_AT), ("checkpoint_saved", 4), ("checkpoint_saved", 6), ("checkpoint_saved", 8)]
