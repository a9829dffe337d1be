"""A run is found from any directory: every run command looks under --runs-dir (./runs)
first, then among the runs this user submitted elsewhere (slurmtrain/recent.py)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from slurmtrain.cli import main
from slurmtrain.errors import UsageError
from slurmtrain import recent
from slurmtrain.runs import rundir


def _run(root, name, job_id, job_name=None):
    run = rundir.create(root, name)
    run.update_manifest(name=run.name, job_name=job_name or name, job_ids=[job_id], state="submitted", nodes=1,
                        submitted_at=f"2026-11-27T10:00:{int(job_id) % 60:02d}")
    return run


def test_a_run_submitted_elsewhere_is_found_by_job_id_name_or_prefix(tmp_path):
    project = _run(tmp_path / "project" / "runs", "llama", "4021")
    other = _run(tmp_path / "other" / "runs", "gpt", "4022")
    here = tmp_path / "home" / "runs"
    assert rundir.resolve("4021", here).path == project.path
    assert rundir.resolve("llama", here).path == project.path  # its job name
    assert rundir.resolve(other.name[:5], here).path == other.path  # a unique prefix of its name
    assert rundir.resolve(other.name, here).path == other.path
    with pytest.raises(UsageError, match="nor any you submitted elsewhere"):
        rundir.resolve("9999", here)


def test_a_run_under_runs_dir_wins_over_one_submitted_elsewhere(tmp_path):
    _run(tmp_path / "elsewhere", "llama", "4021")
    mine = _run(tmp_path / "runs", "llama", "4030")
    assert rundir.resolve("llama", tmp_path / "runs").path == mine.path


def test_a_deleted_run_is_forgotten_and_a_run_is_remembered_once(tmp_path):
    a = _run(tmp_path / "x", "a", "1")
    b = _run(tmp_path / "y", "b", "2")
    recent.remember(a.path)  # again: once in the list, where it came last
    assert recent.known() == [b.path, a.path]
    import shutil
    shutil.rmtree(b.path)
    assert recent.known() == [a.path]


def test_the_file_is_cut_to_the_newest_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(recent, "KEEP", 3)
    runs = [_run(tmp_path / "r", f"n{i}", str(i)) for i in range(7)]
    assert recent.known() == [r.path for r in runs[-3:]]  # seven lines, more than twice 3: cut to 3
    assert len(recent._file().read_text().splitlines()) == 3


def test_an_unwritable_state_folder_loses_no_run(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("SLURMTRAIN_STATE_DIR", str(blocker / "state"))
    run = _run(tmp_path / "runs", "a", "7")
    assert rundir.resolve("7", tmp_path / "runs").path == run.path and recent.known() == []


def test_status_without_a_run_from_another_directory_shows_the_latest_submitted(tmp_path, fake_slurm, monkeypatch):
    fake_slurm(scontrol="", sacct=None)
    run = _run(tmp_path / "project" / "runs", "llama", "4021")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["status"])
    assert result.exit_code == 0, result.output
    assert run.name in result.stdout
    assert f"the latest you submitted, from {run.path.parent}" in result.stderr, result.stderr
    given = CliRunner().invoke(main, ["status", "--runs-dir", str(tmp_path / "runs")])  # meant: not looked past
    assert given.exit_code == 2 and "no runs under" in given.output, given.output
    listed = CliRunner().invoke(main, ["runs"])
    assert f"you submitted runs under {run.path.parent} (--runs-dir DIR)" in listed.stderr, listed.stderr
