"""train.checkpoint_dir: the checkpoints on another file system (scratch), the run directory's
``checkpoints`` a link to them, so resume, status and export find them where they look."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from slurmtrain.errors import UsageError
from slurmtrain.train.__main__ import _checkpoint_home, checkpoint_home


def test_the_folder_is_named_after_the_run_and_a_sweeps_point_after_both(tmp_path, monkeypatch):
    monkeypatch.setenv("SCRATCH", str(tmp_path / "scratch"))
    assert checkpoint_home(Path("/runs/llama-1"), "$SCRATCH/ckpt") == tmp_path / "scratch" / "ckpt" / "llama-1"
    assert checkpoint_home(Path("/runs/sweep-3/points/lr=1e-3"), "${SCRATCH}/ckpt") == \
        tmp_path / "scratch" / "ckpt" / "sweep-3-lr=1e-3"
    monkeypatch.delenv("SCRATCH")
    with pytest.raises(UsageError, match=r"\$SCRATCH/ckpt names a variable that is not set on this node"):
        checkpoint_home(Path("/runs/a"), "$SCRATCH/ckpt")
    with pytest.raises(UsageError, match="give an absolute path"):
        checkpoint_home(Path("/runs/a"), "ckpt")


def test_the_link_is_made_once_and_checked_at_every_start(tmp_path):
    run, scratch = tmp_path / "runs" / "a", tmp_path / "scratch"
    _checkpoint_home(run, str(scratch), make=False)  # another rank: nothing made
    assert not run.exists() and not scratch.exists()
    _checkpoint_home(run, str(scratch), make=True)
    link = run / "checkpoints"
    assert link.is_symlink() and link.resolve() == (scratch / "a").resolve()
    (link / "step_5").mkdir()
    assert (scratch / "a" / "step_5").is_dir()
    _checkpoint_home(run, str(scratch), make=True)  # the next start: as it is
    with pytest.raises(UsageError, match=rf"{link} links to {scratch / 'a'}, but train.checkpoint_dir = "
                                         rf"'{tmp_path / 'other'}' puts this run's checkpoints in "
                                         rf"{tmp_path / 'other' / 'a'}: move them there"):
        _checkpoint_home(run, str(tmp_path / "other"), make=True)


def test_a_changed_variable_is_named_with_its_value_here(tmp_path, monkeypatch):
    run = tmp_path / "runs" / "a"
    monkeypatch.setenv("SCRATCH", str(tmp_path / "s1"))
    _checkpoint_home(run, "$SCRATCH/ckpt", make=True)
    monkeypatch.setenv("SCRATCH", str(tmp_path / "s2"))
    with pytest.raises(UsageError, match=rf"but train.checkpoint_dir = '\$SCRATCH/ckpt' \(here {tmp_path / 's2' / 'ckpt'}\)"
                                         rf" puts this run's checkpoints in {tmp_path / 's2' / 'ckpt' / 'a'}"):
        _checkpoint_home(run, "$SCRATCH/ckpt", make=True)


def test_a_purged_checkpoint_folder_stops_the_start_instead_of_training_from_step_0(tmp_path):
    from slurmtrain import events

    run, scratch = tmp_path / "runs" / "a", tmp_path / "scratch"
    _checkpoint_home(run, str(scratch), make=True)
    events.append(run, "checkpoint_saved", step=200)
    (scratch / "a" / ".slurmtrain-run").unlink()
    (scratch / "a").rmdir()  # the scratch file system's purge
    for rank0 in (True, False):
        with pytest.raises(UsageError, match=rf"{run / 'checkpoints'} links to {scratch / 'a'}, which is gone \(a "
                                             r"scratch file system's purge\?\), though this run saved checkpoints up "
                                             r"to step 200: restore them there, or remove the link"):
            _checkpoint_home(run, str(scratch), make=rank0)
    assert (run / "checkpoints").is_symlink() and not scratch.joinpath("a").exists()  # nothing made meanwhile


def test_the_run_directory_itself_is_no_checkpoint_folder(tmp_path):
    runs = tmp_path / "runs"
    with pytest.raises(UsageError, match="would be the run directory or hold it"):
        _checkpoint_home(runs / "a", str(runs), make=True)
    with pytest.raises(UsageError, match="would be the run directory or hold it"):
        _checkpoint_home(tmp_path / "a" / "a", str(tmp_path), make=True)  # tmp/a, the run directory's parent
    _checkpoint_home(runs / "a", str(tmp_path), make=True)  # tmp/a beside the runs: fine


def test_checkpoints_in_the_run_directory_are_not_left_behind_unsaid(tmp_path):
    run = tmp_path / "a"
    (run / "checkpoints" / "step_5").mkdir(parents=True)
    with pytest.raises(UsageError, match=r"holds this run.s checkpoints, but train.checkpoint_dir = .* puts them in"):
        _checkpoint_home(run, str(tmp_path / "scratch"), make=True)
    (run / "checkpoints" / "step_5").rmdir()  # an empty folder is replaced by the link
    _checkpoint_home(run, str(tmp_path / "scratch"), make=True)
    assert (run / "checkpoints").is_symlink()


def test_two_runs_of_one_name_are_not_sent_into_one_folder(tmp_path):
    scratch = tmp_path / "scratch"
    _checkpoint_home(tmp_path / "team-a" / "run1", str(scratch), make=True)
    with pytest.raises(UsageError, match=rf"{scratch / 'run1'} holds the checkpoints of {tmp_path / 'team-a' / 'run1'}"):
        _checkpoint_home(tmp_path / "team-b" / "run1", str(scratch), make=True)


@pytest.mark.torch
@pytest.mark.slow
def test_the_trainer_saves_there_resumes_from_there_and_export_finds_them(tmp_path):
    pytest.importorskip("torch")
    from trainer_util import setup_run, show, train

    from slurmtrain.train.engines import load_consolidated

    recipe = setup_run(tmp_path, steps=10, save_steps=5)
    common = ["--recipe", str(recipe), "--run-dir", "run", "--set", "train.eval_steps=0",
              "--set", "train.checkpoint_dir=$SCRATCH/ckpt"]
    scratch = tmp_path / "scratch"
    proc = train(common, tmp_path, nproc=1, SCRATCH=str(scratch))
    assert proc.returncode == 0, show(proc)
    link = tmp_path / "run" / "checkpoints"
    assert link.is_symlink() and link.resolve() == (scratch / "ckpt" / "run").resolve()
    assert sorted(p.name for p in (scratch / "ckpt" / "run").glob("step_*")) == ["step_10", "step_5"]
    proc = train([*common, "--train-steps", "14"], tmp_path, nproc=1, SCRATCH=str(scratch))
    assert proc.returncode == 0, show(proc)
    evs = [json.loads(x) for x in (tmp_path / "run" / "events.jsonl").read_text().splitlines()]
    assert [e["step"] for e in evs if e["event"] == "resumed"] == [10]
    assert (scratch / "ckpt" / "run" / "step_14" / "COMPLETE").is_file()
    args, state = load_consolidated(tmp_path / "run")
    assert state and args.n_layers > 0
    proc = train([*common[:-1], "train.checkpoint_dir=/elsewhere"], tmp_path, nproc=1, SCRATCH=str(scratch))
    assert proc.returncode != 0 and "but train.checkpoint_dir = '/elsewhere' puts this run's checkpoints in /elsewhere/run" in \
        proc.stdout + proc.stderr, show(proc)
    assert os.path.isdir(scratch / "ckpt" / "run" / "step_14")
