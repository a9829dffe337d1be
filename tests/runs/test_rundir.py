"""Run directories: unique names, manifest updates, RUN resolution."""

import pytest

from slurmtrain.errors import UsageError
from slurmtrain.runs import rundir


def test_create_never_reuses_a_directory(tmp_path):
    made = [rundir.create(tmp_path, "train") for _ in range(3)]
    assert len({r.path for r in made}) == 3
    assert all(r.path.is_dir() and r.logs.is_dir() and r.name.startswith("train-") for r in made)


def test_manifest_update_merges(tmp_path):
    run = rundir.create(tmp_path, "x")
    run.update_manifest(state="created", job_ids=[])
    run.update_manifest(state="submitted", job_ids=["7"])
    assert run.manifest() == {"state": "submitted", "job_ids": ["7"]}
    assert run.job_id == "7"
    assert not list(run.path.glob(".manifest*"))  # the temporary file was renamed


def _run(tmp_path, name, job_id, when):
    run = rundir.create(tmp_path, name)
    run.update_manifest(name=run.name, job_name=name, job_ids=[job_id], submitted_at=when, state="submitted")
    return run


def test_resolve(tmp_path, monkeypatch):
    a = _run(tmp_path, "alpha", "11", "2025-01-01T00:00:01")
    b = _run(tmp_path, "beta", "12", "2025-01-01T00:00:02")
    b2 = _run(tmp_path, "beta", "13", "2025-01-01T00:00:03")
    assert rundir.resolve(str(a.path), "elsewhere") == a
    assert rundir.resolve(a.name, tmp_path).path == a.path
    assert rundir.resolve("alpha", tmp_path).path == a.path          # unique prefix
    assert rundir.resolve("12", tmp_path).path == b.path             # job id
    assert rundir.resolve("beta", tmp_path).path == b2.path           # job name: the latest run
    assert [r.name for r in rundir.list_runs(tmp_path)] == [a.name, b.name, b2.name]
    _run(tmp_path, "betamax", "14", "2025-01-01T00:00:04")
    with pytest.raises(UsageError, match="ambiguous"):
        rundir.resolve("bet", tmp_path)
    with pytest.raises(UsageError, match="no such run"):
        rundir.resolve("gamma", tmp_path)



def test_a_refused_submission_is_not_the_latest_run_of_its_name(tmp_path):
    """A submit sbatch refused (no SLURM_CONF, too many nodes) left a run directory that
    `status train` and `submit --after train` then took for the run; it stays listed, and
    is found by its own name, or where it is the only one."""
    done = _run(tmp_path, "train", "11", "2025-01-01T00:00:01")
    refused = rundir.create(tmp_path, "train")
    refused.update_manifest(name=refused.name, job_name="train", job_ids=[], state="refused",
                            created_at="2025-01-01T00:00:02")
    assert rundir.resolve("train", tmp_path).path == done.path
    assert rundir.resolve(refused.name, tmp_path).path == refused.path
    only = rundir.create(tmp_path / "other", "solo")
    only.update_manifest(name=only.name, job_name="solo", job_ids=[], state="refused")
    assert rundir.resolve("solo", tmp_path / "other").path == only.path
    for i in range(6):
        _run(tmp_path, f"many{i}", str(20 + i), f"2025-01-01T00:01:0{i}")
    with pytest.raises(UsageError, match=r"7 runs match \(.*, and 2 older\)|6 runs match \(.*, and 1 older\)"):
        rundir.resolve("m", tmp_path)


def test_an_array_task_of_a_sweep_is_its_point(tmp_path):
    sweep = _run(tmp_path, "sw", "74", "2025-01-01T00:00:01")
    sweep.update_manifest(array=2, sweep={"points": [{"label": "lr=0.1"}, {"label": "lr=0.2"}]})
    for task, label in enumerate(["lr=0.1", "lr=0.2"]):
        point = rundir.RunDir(sweep.path / "points" / label)
        point.path.mkdir(parents=True)
        point.update_manifest(in_sweep=sweep.name, job_ids=[f"74_{task}"])
    assert rundir.resolve("74_1", tmp_path).path == sweep.path / "points" / "lr=0.2"
    assert rundir.resolve("74", tmp_path).path == sweep.path
    assert rundir.resolve("74_5", tmp_path).path == sweep.path  # no such point: the sweep, as before


def test_node_logs(tmp_path):
    run = _run(tmp_path, "n", "5", "t")
    for name in ("job-5.out", "5-stnode1.out", "5-stnode2.out", "4-stnode1.out"):
        (run.logs / name).write_text(name)
    assert list(run.node_logs()) == ["stnode1", "stnode2"]
    assert run.batch_logs()[None].name == "job-5.out"
    assert list(run.node_logs("4")) == ["stnode1"]


def test_git_state(tmp_path):
    assert rundir.git_state(tmp_path) is None
    state = rundir.git_state(rundir.__file__.rsplit("/", 3)[0])
    assert state is None or len(state["commit"]) == 40
