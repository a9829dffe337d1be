"""slurmtrain.stop.lightning with a real Lightning Trainer on the CPU (tests/stop/lightning_train.py
in a subprocess): SIGTERM after batch 3 -- Lightning has a SIGTERM handler of its own that
the callback must override -- saves a stop checkpoint, reports it and exits 75; started
again, the script continues from step 3, skipping a newer checkpoint cut short."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import stop_util

from slurmtrain import events

pytest.importorskip("lightning")
pytestmark = pytest.mark.torch

SCRIPT = Path(__file__).resolve().parent / "lightning_train.py"
STOP_AT = 3


def _run(run_dir: Path, *args: str, launcher: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    return stop_util.run([*(launcher or [sys.executable]), str(SCRIPT), "--root", str(run_dir / "out"),
                          "--max-steps", "8", *args], stop_util.job_env(run_dir))


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("lightning")
    return run_dir, _run(run_dir, "--signal-at", str(STOP_AT), "--signal-name", "TERM")


@pytest.mark.slow  # a real Lightning run in a subprocess (seconds)
def test_lightning_sigterm_saves_reports_and_exits_75(stopped_run):
    run_dir, proc = stopped_run
    assert proc.returncode == 75, proc.stderr[-3000:]
    ckpts = run_dir / "out" / "checkpoints"
    stop_ckpt = ckpts / f"last-slurmtrain-stop-step={STOP_AT}.ckpt"
    assert sorted(p.name for p in ckpts.iterdir()) == ["epoch=0-step=2.ckpt", stop_ckpt.name]
    got = [(e["event"], e["step"], e.get("path")) for e in events.read(run_dir)]
    assert got == [("checkpoint_saved", 2, None),  # ModelCheckpoint's, reported after it was written
                   ("checkpoint_saved", STOP_AT, str(stop_ckpt)), ("stopped", STOP_AT, None)]


@pytest.mark.slow  # a real Lightning run in a subprocess (seconds)
def test_lightning_resumes_from_the_newest_complete_checkpoint(stopped_run, tmp_path):
    run_dir, proc = stopped_run
    assert proc.returncode == 75, proc.stderr[-3000:]
    shutil.copytree(run_dir, tmp_path, dirs_exist_ok=True)
    ckpts = tmp_path / "out" / "checkpoints"
    cut = ckpts / "epoch=0-step=5.ckpt"  # newer, cut short by a kill mid-copy
    cut.write_bytes((ckpts / f"last-slurmtrain-stop-step={STOP_AT}.ckpt").read_bytes()[:500])

    proc = _run(tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"first_step": STOP_AT + 1, "global_step": 8}
    assert "skipping" in proc.stderr and cut.name in proc.stderr
    got = [(e["event"], e["step"]) for e in events.read(tmp_path)][3:]
    # ... and at the end of training the callback reports that the program finished
    assert got == [("resumed", STOP_AT), ("checkpoint_saved", 4), ("checkpoint_saved", 6), ("checkpoint_saved", 8),
                   ("finished", 8)]


@pytest.mark.slow  # two real Lightning runs in a subprocess (seconds)
def test_lightnings_own_ckpt_path_last_resumes_from_the_stop_checkpoint(tmp_path):
    """ModelCheckpoint(save_last=True) + fit(ckpt_path="last"), a Lightning user's habit:
    last.ckpt is step 2's, the stop's is step 3. Lightning took last.ckpt and step 3 ran
    twice, silently; the stop checkpoint's name makes it Lightning's newest "last" file."""
    stopped = _run(tmp_path, "--resume", "last", "--signal-at", str(STOP_AT), "--signal-name", "TERM")
    assert stopped.returncode == 75, stopped.stderr[-3000:]
    assert (tmp_path / "out" / "checkpoints" / "last.ckpt").is_file()
    proc = _run(tmp_path, "--resume", "last")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"first_step": STOP_AT + 1, "global_step": 8}


@pytest.mark.slow  # a real Lightning run in a subprocess (seconds)
def test_a_start_older_than_the_stop_checkpoint_is_warned_of(stopped_run, tmp_path):
    run_dir, proc = stopped_run
    assert proc.returncode == 75, proc.stderr[-3000:]
    shutil.copytree(run_dir, tmp_path, dirs_exist_ok=True)
    fresh = _run(tmp_path, "--resume", "none", "--max-steps", "2")
    assert fresh.returncode == 0, fresh.stderr[-3000:]
    assert (f"training starts at step 0 but the stop checkpoint {tmp_path / 'out' / 'checkpoints'}/"
            f"last-slurmtrain-stop-step={STOP_AT}.ckpt is newer (step {STOP_AT})") in fresh.stderr, fresh.stderr[-3000:]


@pytest.mark.slow
def test_lightning_ddp_two_ranks_all_stop_when_only_rank_0_gets_sigterm(tmp_path):
    proc = _run(tmp_path, "--devices", "2", "--signal-at", str(STOP_AT), "--signal-rank", "0",
                "--signal-name", "TERM", launcher=tuple(stop_util.torchrun(2)))
    # torchrun reports any worker's non-zero exit as 1; the events are what counts
    assert proc.returncode == 1 and proc.stderr.count("exitcode  : 75") == 2, proc.stderr[-3000:]
    assert (tmp_path / "out" / "checkpoints" / f"last-slurmtrain-stop-step={STOP_AT}.ckpt").is_file()
    assert [(e["event"], e["step"]) for e in events.read(tmp_path)] == [
        ("checkpoint_saved", 2), ("checkpoint_saved", STOP_AT), ("stopped", STOP_AT)]


def test_lightning_callback_warns_when_lightnings_own_slurm_requeue_is_on(caplog):
    import signal
    from types import SimpleNamespace

    from lightning.pytorch.plugins.environments import SLURMEnvironment

    from slurmtrain import stop
    from slurmtrain.stop.lightning import StopCallback

    handlers = {s: signal.getsignal(s) for s in stop.stop_signals()}
    try:
        callback = StopCallback()
        for requeue, warned in ((False, False), (True, True)):
            caplog.clear()
            trainer = SimpleNamespace(strategy=SimpleNamespace(cluster_environment=SLURMEnvironment(auto_requeue=requeue)))
            callback.setup(trainer, None, "fit")
            assert ("auto-requeue is on" in caplog.text) == warned
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)
        stop._reset_for_tests()
