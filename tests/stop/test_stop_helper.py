"""slurmtrain.stop, the torch-free helper: stop requests, events, and its import weight."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import stop_util

from slurmtrain import events, stop

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


@pytest.fixture
def job(tmp_path, monkeypatch):
    """A slurmtrain job's environment on rank 0; the module's state and the process's
    signal handlers are put back afterwards."""
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)}
    for name in ("RANK", "SLURMTRAIN_STOP_SIGNAL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SLURMTRAIN_RUN_DIR", str(tmp_path))
    monkeypatch.setenv("SLURMTRAIN_STOP_FILE", str(tmp_path / ".stop-1"))
    monkeypatch.setenv("SLURMTRAIN_STOP_SIGNAL", "USR2")
    stop._reset_for_tests()
    yield tmp_path
    stop._reset_for_tests()
    for s, h in handlers.items():
        signal.signal(s, h)


@pytest.mark.parametrize("sig", [signal.SIGUSR2, signal.SIGTERM])
def test_stop_signal_makes_should_stop_true(job, sig):
    assert stop.should_stop() is False  # installs the handlers on first use
    os.kill(os.getpid(), sig)
    assert stop.should_stop() is True
    assert stop.reason() == sig.name


def test_stop_signal_named_in_the_environment_is_handled(job, monkeypatch):
    monkeypatch.setenv("SLURMTRAIN_STOP_SIGNAL", "SIGUSR1")
    assert stop.install() == [signal.SIGTERM, signal.SIGUSR1]
    os.kill(os.getpid(), signal.SIGUSR1)
    assert stop.should_stop() and stop.reason() == "SIGUSR1"


def test_stop_file_makes_should_stop_true(job):
    assert stop.should_stop() is False
    stop._stop_file_checked = float("-inf")  # the next call looks at the file again
    Path(os.environ["SLURMTRAIN_STOP_FILE"]).touch()
    assert stop.should_stop() is True
    assert stop.reason().startswith("stop file ")


def test_stop_file_is_looked_at_once_per_second(job, monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(stop.time, "monotonic", lambda: now[0])
    assert stop.should_stop() is False
    Path(os.environ["SLURMTRAIN_STOP_FILE"]).touch()
    now[0] += 0.5
    assert stop.should_stop() is False  # no stat yet
    now[0] += 0.5
    assert stop.should_stop() is True


def test_agree_without_a_process_group_is_the_flag_itself(job):
    assert stop.agree(True) is True and stop.agree(False) is False
    stop.barrier()  # no group: nothing to wait for


def test_saved_and_stopped_write_events_and_exit_75(job):
    stop.resumed(10)
    stop.saved(12, job / "ckpt")
    with pytest.raises(SystemExit) as exit_info:
        stop.stopped(12)
    assert exit_info.value.code == stop.STOP_EXIT_CODE == 75
    stop.finished(20)
    lines = (job / "events.jsonl").read_text().splitlines()
    got = [json.loads(line) for line in lines]  # each line is one JSON object
    assert [(e["event"], e["step"]) for e in got] == [
        ("resumed", 10), ("checkpoint_saved", 12), ("stopped", 12), ("finished", 20)]
    assert got[1]["path"] == str(job / "ckpt") and all(isinstance(e["time"], float) for e in got)


def test_only_global_rank_0_writes_events(job, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    stop.saved(3)
    with pytest.raises(SystemExit):
        stop.stopped(3)  # every rank exits 75, rank 1 silently
    assert events.read(job) == []
    monkeypatch.setenv("RANK", "0")
    stop.saved(3)
    assert [e["event"] for e in events.read(job)] == ["checkpoint_saved"]


def test_metrics_are_the_runs_metrics_that_watch_and_plot_read(job, monkeypatch):
    from slurmtrain.runs import progress

    stop.metrics(10, 100, loss=2.5, lr=3e-4, step_time=0.5, note="text is left out", flag=True)
    stop.metrics(20, 100, eval_loss=2.25)
    monkeypatch.setenv("RANK", "1")
    stop.metrics(30, 100, loss=9.0)  # rank 1: nothing
    train, evals = progress.read_metrics(job)
    assert [(r["step"], r["total_steps"], r["loss"], r["lr"]) for r in train] == [(10, 100, 2.5, 3e-4)]
    assert "note" not in train[0] and "flag" not in train[0] and [r["eval_loss"] for r in evals] == [2.25]
    snap = progress.snapshot(job)
    assert (snap.step, snap.total, snap.eta_s) == (10, 100, 45.0)


def test_metrics_without_a_step_time_take_it_from_the_calls_themselves(job, monkeypatch):
    """A step's time is what the ETA and status's slow stretches read (runs/pace.py): a
    program that passes none gets the time since its last call, per step."""
    from slurmtrain.runs import progress

    clock = iter([100.0, 102.0, 112.0])
    monkeypatch.setattr(stop.time, "monotonic", lambda: next(clock))
    stop.metrics(10, 100, loss=3.0)
    stop.metrics(12, 100, loss=2.9)   # 2 steps in 2 s
    stop.metrics(13, 100, loss=2.8)   # 1 step in 10 s: a slow one
    train, _ = progress.read_metrics(job)
    assert [r.get("step_time") for r in train] == [None, 1.0, 10.0]


def test_no_events_outside_a_job(job, monkeypatch, tmp_path):
    monkeypatch.delenv("SLURMTRAIN_RUN_DIR")
    monkeypatch.chdir(tmp_path)
    assert not stop.in_job()
    stop.saved(1)
    stop.finished()
    stop.metrics(1, loss=1.0)
    with pytest.raises(SystemExit):
        stop.stopped(1)
    assert list(tmp_path.iterdir()) == []


def test_import_does_not_import_torch_or_install_handlers():
    code = ("import signal, sys; import slurmtrain.stop as s; "
            "assert 'torch' not in sys.modules, 'torch imported'; "
            "assert signal.getsignal(signal.SIGUSR2) is signal.SIG_DFL; "
            "s.should_stop(); assert 'torch' not in sys.modules; "
            "assert s.agree(False) is False and 'torch' not in sys.modules")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=60)


@pytest.mark.torch
def test_agree_and_barrier_across_two_gloo_ranks(tmp_path):
    """Only rank 1 is asked to stop; both agree, and only rank 0 reports."""
    pytest.importorskip("torch")
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "SLURMTRAIN_STOP_FILE")}
    env.update(PYTHONPATH=str(REPO), SLURMTRAIN_RUN_DIR=str(tmp_path), SLURMTRAIN_STOP_SIGNAL="USR2",
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(stop_util.free_port()), WORLD_SIZE="2")
    procs = [subprocess.Popen([sys.executable, str(HERE / "agree_gloo.py")], env={**env, "RANK": str(r)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in (0, 1)]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 75, err
    assert [json.loads(out) for out, _ in outs] == [{"rank": 0, "agreed": True, "reason": "another rank was asked to stop"},
                                                     {"rank": 1, "agreed": True, "reason": "SIGUSR2"}]
    assert [(e["event"], e["step"]) for e in events.read(tmp_path)] == [("checkpoint_saved", 5), ("stopped", 5)]

