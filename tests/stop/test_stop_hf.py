"""slurmtrain.stop.hf with a real transformers Trainer on the CPU (tests/stop/hf_train.py in
a subprocess, so its exit status can be seen): a stop signal at step 3 saves checkpoint-3,
marks and reports it and exits 75; started again, the script continues from step 3."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import stop_util

from slurmtrain import events
from slurmtrain.runs import progress
from slurmtrain.stop.checkpoints import MARKER

pytest.importorskip("transformers")
pytest.importorskip("accelerate")
pytestmark = pytest.mark.torch

SCRIPT = Path(__file__).resolve().parent / "hf_train.py"
STOP_AT = 3


def _run(run_dir: Path, *args: str, launcher: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    return stop_util.run([*(launcher or [sys.executable]), str(SCRIPT), "--output-dir", str(run_dir / "out"),
                          "--max-steps", "8", "--save-steps", "2", *args], stop_util.job_env(run_dir))


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("hf")
    return run_dir, _run(run_dir, "--signal-at", str(STOP_AT))


@pytest.mark.slow  # a real HF Trainer run in a subprocess (seconds)
def test_hf_stop_signal_saves_marks_reports_and_exits_75(stopped_run):
    run_dir, proc = stopped_run
    assert proc.returncode == 75, proc.stderr[-3000:]
    out = run_dir / "out"
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint-2", f"checkpoint-{STOP_AT}"]
    for ckpt in out.iterdir():
        assert (ckpt / MARKER).is_file() and (ckpt / "trainer_state.json").is_file()
    got = [(e["event"], e["step"], e.get("path")) for e in events.read(run_dir)]
    assert got == [("checkpoint_saved", 2, str(out / "checkpoint-2")),  # the periodic save
                   ("checkpoint_saved", STOP_AT, str(out / f"checkpoint-{STOP_AT}")),
                   ("stopped", STOP_AT, None)]


@pytest.mark.slow  # a real HF Trainer run in a subprocess (seconds)
def test_hf_resumes_from_the_newest_complete_checkpoint(stopped_run, tmp_path):
    run_dir, proc = stopped_run
    assert proc.returncode == 75, proc.stderr[-3000:]
    shutil.copytree(run_dir, tmp_path, dirs_exist_ok=True)
    half = tmp_path / "out" / "checkpoint-7"  # newer, cut short by a kill: no marker
    half.mkdir()
    (half / "model.safetensors").write_bytes(b"partial")

    proc = _run(tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"first_step": STOP_AT + 1, "global_step": 8}
    assert "skipping" in proc.stderr and "checkpoint-7" in proc.stderr
    got = [(e["event"], e["step"]) for e in events.read(tmp_path)][3:]
    # ... and at the end of training the callback reports that the program finished
    assert got == [("resumed", STOP_AT), ("checkpoint_saved", 4), ("checkpoint_saved", 6), ("checkpoint_saved", 8),
                   ("finished", 8)]
    # The Trainer's logs (every 2 steps) are the run's metrics: what `watch` and `plot` read.
    train, _ = progress.read_metrics(tmp_path)
    assert [r["step"] for r in train] == [2, 4, 6, 8] and {r["total_steps"] for r in train} == {8}
    assert all(r["loss"] > 0 and "lr" in r for r in train) and "step_time" in train[-1]


@pytest.mark.slow
def test_hf_two_ranks_under_torchrun_all_stop_when_only_rank_1_is_signalled(tmp_path):
    proc = _run(tmp_path, "--signal-at", str(STOP_AT), "--signal-rank", "1", launcher=tuple(stop_util.torchrun(2)))
    # torchrun reports any worker's non-zero exit as 1; the events are what counts
    assert proc.returncode == 1 and proc.stderr.count("exitcode  : 75") == 2, proc.stderr[-3000:]
    ckpt = tmp_path / "out" / f"checkpoint-{STOP_AT}"
    assert (ckpt / MARKER).is_file() and (ckpt / "rng_state_1.pth").is_file()
    assert [(e["event"], e["step"]) for e in events.read(tmp_path)] == [
        ("checkpoint_saved", 2), ("checkpoint_saved", STOP_AT), ("stopped", STOP_AT)]


def test_a_trainer_that_missed_the_launchers_world_is_warned_of_and_marks_once(tmp_path, monkeypatch, caplog):
    """HF + DeepSpeed on CPU without --use_cpu: every process took itself for a world of one
    and for rank 0; each wrote the marker through one temporary name, and they raced. Said
    at the start (rank 0 by the launcher's RANK), and only that rank marks."""
    import logging
    from types import SimpleNamespace

    from slurmtrain import stop
    from slurmtrain.stop import hf

    monkeypatch.setenv("WORLD_SIZE", "4")
    callback = hf.StopCallback()
    args = SimpleNamespace(world_size=1, output_dir=str(tmp_path))
    state = SimpleNamespace(global_step=0, is_world_process_zero=True)
    caplog.set_level(logging.WARNING, logger="slurmtrain.stop")
    for rank in ("0", "1"):
        monkeypatch.setenv("RANK", rank)
        callback.on_train_begin(args, state, None)
    assert [r.getMessage()[:82] for r in caplog.records] == [
        "the Trainer sees a world of 1 process(es), but the launcher started 4: each trains"], caplog.records
    folder = tmp_path / "checkpoint-2"
    folder.mkdir()
    monkeypatch.setattr(stop, "barrier", lambda: None)
    state.global_step = 2
    callback.on_save(args, state, None)  # rank 1, though the Trainer calls it world process zero
    assert not (folder / MARKER).exists()
    monkeypatch.setenv("RANK", "0")
    callback.on_save(args, state, None)
    assert (folder / MARKER).is_file() and not list(folder.glob(".*.tmp"))
