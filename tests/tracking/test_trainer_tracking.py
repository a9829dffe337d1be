"""The trainer's side of tracking (issue 15): the skip rule after a resume from an earlier
checkpoint (no duplicate or backwards step), read back from real W&B offline files and
TensorBoard events; nothing opened, and nothing imported, without SLURMTRAIN_TRACKERS;
a tracker missing on the node costs the tracking, not the run."""

from __future__ import annotations

import json
import logging
import sys
import time

import pytest

pytest.importorskip("torch", reason="torch is not installed on this machine (the [train] extra)")
from slurmtrain.train import tracking as ttrack  # noqa: E402
import waiting  # noqa: E402
from readback import tensorboard_scalars, wandb_history  # noqa: E402

pytestmark = pytest.mark.torch


def metrics_lines(run_dir, records):
    with (run_dir / "metrics.jsonl").open("a") as fh:
        for r in records:
            fh.write(json.dumps(r) + "\n")


def train_records(steps):
    return [{"time": 1.0, "step": s, "total_steps": 30, "loss": 1.0 / s, "lr": 0.1, "mfu": None} for s in steps]


def start(run_dir, names, records):
    """One start of the trainer, as far as tracking goes: open, write records, close."""
    trackers = ttrack.Trackers(run_dir, names, ttrack.last_logged_step(run_dir), {"recipe": {"x": 1}})
    for r in records:
        metrics_lines(run_dir, [r])
        trackers.log(r)
    trackers.close()


def test_no_trackers_asked_opens_and_imports_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv("SLURMTRAIN_TRACKERS", raising=False)
    monkeypatch.setitem(sys.modules, "wandb", None)  # an import would raise
    assert ttrack.open_trackers(tmp_path, {}, rank0=True) is None
    monkeypatch.setenv("SLURMTRAIN_TRACKERS", "wandb")
    assert ttrack.open_trackers(tmp_path, {}, rank0=False) is None  # rank 0 only


def test_a_tracker_missing_on_the_node_is_a_warning(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("SLURMTRAIN_TRACKERS", "wandb")
    monkeypatch.setitem(sys.modules, "wandb", None)
    with caplog.at_level(logging.WARNING, logger="slurmtrain.train"):
        assert ttrack.open_trackers(tmp_path, {}, rank0=True) is None
    assert "wandb is not installed here" in caplog.text


def test_last_logged_step_survives_a_cut_line(tmp_path):
    assert ttrack.last_logged_step(tmp_path) == 0
    metrics_lines(tmp_path, train_records([2, 4]) + [{"step": 4, "eval_loss": 2.0}])
    with (tmp_path / "metrics.jsonl").open("a") as fh:
        fh.write('{"step": 9')  # a kill in the middle of a line
    assert ttrack.last_logged_step(tmp_path) == 4


def _wandb_history_once_written(run_dir, run_id: str, steps: list[int]):
    """wandb_history over the run's offline folders, once it holds ``steps`` or the files
    stop changing. W&B's service process writes the ``.wandb`` files: on a loaded machine
    the second start's rows were not there yet when ``finish()`` had returned (a CI run
    read steps 2-10 only, while W&B's own summary of that start showed step 16)."""
    def folders():
        return sorted((run_dir / "wandb").glob(f"offline-run-*-{run_id}"))

    def complete():
        try:
            got = wandb_history(folders())
        except Exception:  # noqa: BLE001 - a record being written; read again
            return None
        return got if [r["_step"] for r in got[1]] == steps else None
    try:
        return waiting.wait_for("W&B's offline files to hold every step", complete,
                                lambda: waiting.files_fingerprint(run_dir / "wandb"), stall=60)
    except AssertionError:
        return wandb_history(folders())  # the assertions that follow say what is missing


@pytest.mark.slow
def test_resume_from_an_earlier_checkpoint_logs_each_step_once_in_order(tmp_path, monkeypatch):
    pytest.importorskip("wandb", reason="wandb is not installed on this machine (the [test] extra has it)")
    pytest.importorskip("tensorboard", reason="tensorboard is not installed on this machine")
    for k in ("WANDB_RUN_ID", "WANDB_DIR", "WANDB_PROJECT", "WANDB_RESUME"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    # A start whose wandb.init times out (90 s by default; seen on a loaded machine) is, by
    # design, a warning that costs the tracking: here that would lose the second start's rows.
    monkeypatch.setenv("WANDB_INIT_TIMEOUT", "900")
    names = ["wandb", "tensorboard"]
    # First start: steps 2..10 and an eval at 6; killed after step 10, last checkpoint at 6.
    first = train_records(range(2, 11, 2))
    start(tmp_path, names, first[:3] + [{"step": 6, "eval_loss": 3.0}] + first[3:])
    # Second start resumes from step 6: steps 8 and 10 are trained (and written to
    # metrics.jsonl) again, then 12..16 are new.
    time.sleep(1.1)  # W&B names a start's folder by the second: two real starts never share one
    second = train_records(range(8, 17, 2))
    start(tmp_path, names, second[:3] + [{"step": 12, "eval_loss": 2.0}] + second[3:])
    run_id = (tmp_path / "wandb-run-id").read_text().strip()
    ids, rows = _wandb_history_once_written(tmp_path, run_id, [2, 4, 6, 8, 10, 12, 14, 16])
    assert ids == {run_id}
    assert [r["_step"] for r in rows] == [2, 4, 6, 8, 10, 12, 14, 16]
    assert [r["loss"] for r in rows][3] == 1.0 / 8  # the first start's value stays
    assert [r["_step"] for r in rows if "eval_loss" in r] == [6, 12]
    assert tensorboard_scalars(tmp_path / "tensorboard", "loss") == [2, 4, 6, 8, 10, 12, 14, 16]
    assert tensorboard_scalars(tmp_path / "tensorboard", "eval_loss") == [6, 12]
