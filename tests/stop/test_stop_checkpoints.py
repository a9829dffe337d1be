"""slurmtrain.stop.checkpoints: the newest complete checkpoint, without any framework."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from slurmtrain.stop import checkpoints
from slurmtrain.stop.checkpoints import MARKER


def _hf(root: Path, step: int, marker: bool, state: bool = True) -> Path:
    d = root / f"checkpoint-{step}"
    d.mkdir(parents=True)
    (d / "model.safetensors").write_bytes(b"weights")
    if state:
        (d / "trainer_state.json").write_text("{}")
    if marker:
        checkpoints.mark_complete(d)
    return d


def test_hf_skips_a_half_written_newer_checkpoint(tmp_path):
    _hf(tmp_path, 10, marker=True)
    good = _hf(tmp_path, 20, marker=True)
    _hf(tmp_path, 30, marker=False)  # killed before the marker; trainer_state.json may be there
    _hf(tmp_path, 40, marker=False, state=False)
    (tmp_path / "checkpoint-50.tmp").mkdir()  # not a checkpoint name
    assert checkpoints.newest_hf(tmp_path) == good
    assert [(s, c) for s, _, c in checkpoints.hf_checkpoints(tmp_path)] == [
        (40, False), (30, False), (20, True), (10, True)]


def test_hf_checkpoints_from_before_the_callback_count_when_they_have_trainer_state(tmp_path):
    old = _hf(tmp_path, 100, marker=False)
    _hf(tmp_path, 200, marker=False, state=False)  # the Trainer writes trainer_state.json last
    assert checkpoints.newest_hf(tmp_path) == old
    new = _hf(tmp_path, 300, marker=True)  # the callback is in use from here on
    assert checkpoints.newest_hf(tmp_path) == new


def test_hf_none_when_nothing_is_complete_or_no_folder(tmp_path):
    assert checkpoints.newest_hf(tmp_path / "missing") is None
    _hf(tmp_path, 5, marker=False, state=False)
    assert checkpoints.newest_hf(tmp_path) is None


def test_hf_resume_from_skips_a_half_written_checkpoint(tmp_path):
    hf = pytest.importorskip("slurmtrain.stop.hf")  # imports transformers
    good = _hf(tmp_path, 2, marker=True)
    _hf(tmp_path, 4, marker=False)
    assert hf.resume_from(tmp_path) == str(good)
    assert hf.resume_from(tmp_path / "missing") is None


def _zip(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as z:  # torch.save's format
        z.writestr("archive/data.pkl", b"x" * 1000)
    return path


def test_lightning_newest_complete_file_or_marked_folder(tmp_path, monkeypatch):
    import os

    older = _zip(tmp_path / "lightning_logs" / "version_0" / "checkpoints" / "epoch=0-step=2.ckpt")
    newer = _zip(tmp_path / "checkpoints" / "last-slurmtrain-stop-step=3.ckpt")
    cut = tmp_path / "checkpoints" / "epoch=0-step=4.ckpt"
    cut.write_bytes(newer.read_bytes()[:-30])  # a copy cut short: no central directory
    sharded = tmp_path / "checkpoints" / "sharded.ckpt"
    sharded.mkdir()
    for i, p in enumerate([older, newer, cut, sharded]):
        os.utime(p, (1000 + i, 1000 + i))
    assert checkpoints.newest_lightning(tmp_path) == newer  # cut and the unmarked folder are skipped
    checkpoints.mark_complete(sharded)
    os.utime(sharded / MARKER, (2000, 2000))
    assert checkpoints.newest_lightning(tmp_path) == sharded
    assert checkpoints.newest_lightning(tmp_path / "missing") is None


def test_finding_none_is_warned_of_where_the_run_saved_before(tmp_path, monkeypatch, caplog):
    """A first start finds nothing, rightly, in silence; after this run saved (its events), a
    folder with none, or one that is missing, is a likely mistake (a folder per job id): said,
    naming the checkpoint the run reported."""
    import logging

    from slurmtrain import events

    run = tmp_path / "run"
    run.mkdir()
    monkeypatch.setenv("SLURMTRAIN_RUN_DIR", str(run))
    caplog.set_level(logging.INFO, logger="slurmtrain.stop")
    checkpoints.say_none_found(tmp_path / "out", "checkpoint-<step>")
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]  # a first start
    events.append(run, "checkpoint_saved", step=40, path="/ck/version_7/last.ckpt")
    events.append(run, "checkpoint_saved", step=50, tier="memory")  # a node-memory copy: not a resume point
    checkpoints.say_none_found(tmp_path / "missing", "*.ckpt")
    checkpoints.say_none_found(tmp_path, "*.ckpt")
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 2, warned
    assert warned[0].startswith(f"resume_from: {tmp_path / 'missing'} does not exist, though this run saved a "
                                "checkpoint of step 40 at /ck/version_7/last.ckpt"), warned
    assert warned[1].startswith(f"resume_from: no complete *.ckpt checkpoint under {tmp_path}, though this run "
                                "saved one of step 40"), warned
    caplog.clear()
    events.append(run, "checkpoint_saved", step=60, path=str(tmp_path / "ck" / "last.ckpt"))  # under it, gone
    checkpoints.say_none_found(tmp_path, "*.ckpt")
    assert [r.getMessage() for r in caplog.records] == [
        f"resume_from: the checkpoint of step 60 this run saved at {tmp_path / 'ck' / 'last.ckpt'} is gone (removed, "
        "or purged from a scratch file system): training from the start"]
    caplog.clear()
    array = tmp_path / "array"
    array.mkdir()
    monkeypatch.setenv("SLURMTRAIN_RUN_DIR", str(array))
    monkeypatch.setenv("SLURMTRAIN_ARRAY_TASK", "0")
    events.append(array, "checkpoint_saved", step=40, path="/ck/task0/last.ckpt")  # task 0's, tagged so
    monkeypatch.setenv("SLURMTRAIN_ARRAY_TASK", "1")  # another task of the array: its own first start
    checkpoints.say_none_found(tmp_path / "missing", "*.ckpt")
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    monkeypatch.delenv("SLURMTRAIN_ARRAY_TASK")
    monkeypatch.setenv("RANK", "1")  # said once, by global rank 0
    checkpoints.say_none_found(tmp_path / "missing", "*.ckpt")
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_lightning_resume_from_takes_a_ckpt_path_itself(tmp_path):
    """(lightning.resume_from's answer, without importing Lightning.)"""
    whole = _zip(tmp_path / "ck" / "last.ckpt")
    assert checkpoints.lightning_resume_point(whole) == whole
    cut = tmp_path / "ck" / "cut.ckpt"
    cut.write_bytes(whole.read_bytes()[:-30])
    assert checkpoints.lightning_resume_point(cut) == whole  # incomplete: its folder's newest complete one
