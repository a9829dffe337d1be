"""[tracking] keys, the W&B run id fixed in the run directory, what the job script exports
(run in bash), the submit-time check for an installed tracker, status rows and `sync`
(issue 15). No Slurm, no torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurmtrain import tracking
from slurmtrain.errors import ConfigError
from slurmtrain.profile import load_profile
from slurmtrain.render import JobSpec, render

REPO = Path(__file__).resolve().parents[2]
SENTINEL = "sentinel-key-do-not-write-0451"


def cli(*args, cwd, env=None):
    return subprocess.run([sys.executable, "-m", "slurmtrain", *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})}, timeout=120)


def script(sets, run_dir=None, name="job"):
    return render(load_profile("local", sets), JobSpec(command=("python3", "x.py"), job_name=name, run_dir=run_dir))


def tracking_part(text: str) -> str:
    start = text.index("# ---- experiment tracking")
    return text[start:text.index("# ----", start + 10)]


def test_off_by_default_and_nothing_exported():
    p = load_profile("local").profile
    assert (p.tracking.wandb, p.tracking.tensorboard, p.tracking.mode) == (False, False, "offline")
    text = script([])
    assert "WANDB_RUN_ID" not in text and "SLURMTRAIN_TRACKERS" not in text


@pytest.mark.parametrize("sets, key", [
    (["tracking.tags=['a b']"], "tracking.tags"),
    (["tracking.mode=cloud"], "tracking.mode"),
    (["tracking.project=my,project"], "tracking.project"),
    (["tracking.api_key_var=1KEY"], "tracking.api_key_var"),
])
def test_bad_keys_name_the_key(sets, key):
    with pytest.raises(ConfigError) as err:
        load_profile("local", sets)
    assert err.value.key == key


def test_bad_key_on_the_command_line_is_one_line_exit_2(tmp_path):
    proc = cli("gen", "--set", "tracking.mode=cloud", "--", "python3", "x.py", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "tracking.mode" in proc.stderr, proc.stderr


def run_exports(text: str, run_dir: Path, env: dict[str, str]) -> dict[str, str]:
    """The tracking part of a job script run by bash: the variables it exports."""
    body = f'RUN_DIR={run_dir}\n{tracking_part(text)}\nenv -0\n'
    clean = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    out = subprocess.run(["bash", "-c", body], env={**clean, **env}, capture_output=True, timeout=30, check=True)
    return dict(item.split("=", 1) for item in out.stdout.decode().split("\0") if "=" in item)


def test_the_script_exports_the_run_and_keeps_what_the_user_set(tmp_path):
    text = script(["tracking.wandb=true", "tracking.tags=['x','y']", "tracking.name=my run"], name="llama")
    got = run_exports(text, tmp_path, {})
    run_id = (tmp_path / tracking.RUN_ID_FILE).read_text().strip()  # a `gen` script draws it at its first start
    assert len(run_id) == 8 and got["WANDB_RUN_ID"] == run_id
    assert (got["WANDB_RESUME"], got["WANDB_DIR"], got["WANDB_PROJECT"]) == ("allow", str(tmp_path), "llama")
    assert (got["WANDB_TAGS"], got["WANDB_NAME"], got["WANDB_MODE"]) == ("x,y", "my run", "offline")
    assert got["SLURMTRAIN_TRACKERS"] == "wandb"
    assert run_exports(text, tmp_path, {})["WANDB_RUN_ID"] == run_id  # the next start: the same run
    mine = run_exports(text, tmp_path, {"WANDB_RUN_ID": "own", "WANDB_PROJECT": "p2", "WANDB_RESUME": "must",
                                        "WANDB_DIR": "/d", "WANDB_NAME": "n"})
    assert [mine[k] for k in ("WANDB_RUN_ID", "WANDB_PROJECT", "WANDB_RESUME", "WANDB_DIR", "WANDB_NAME")] == \
        ["own", "p2", "must", "/d", "n"]


def test_the_api_key_passes_by_name_only(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_WANDB_KEY", SENTINEL)
    text = script(["tracking.wandb=true", "tracking.mode=online", "tracking.api_key_var=MY_WANDB_KEY"])
    assert SENTINEL not in text and "MY_WANDB_KEY" in text
    got = run_exports(text, tmp_path, {"MY_WANDB_KEY": SENTINEL})
    assert got["WANDB_API_KEY"] == SENTINEL and got["WANDB_MODE"] == "online"


def test_the_run_id_is_fixed_when_the_run_directory_is_created(tmp_path, monkeypatch):
    from slurmtrain.runs.submit import prepare

    monkeypatch.setenv("WANDB_API_KEY", SENTINEL)
    loaded = load_profile("local", ["tracking.wandb=true", "tracking.tensorboard=true", "tracking.entity=team"])
    run = prepare(loaded, JobSpec(command=("python3", "x.py"), job_name="demo"), tmp_path / "runs", cwd=tmp_path)
    run_id = (run.path / tracking.RUN_ID_FILE).read_text().strip()
    entry = run.manifest()["tracking"]
    assert entry["wandb"] == {"run_id": run_id, "project": "demo", "entity": "team", "mode": "offline"}
    assert entry["tensorboard"] == str(run.path / "tensorboard")
    assert run_exports(run.script.read_text(), run.path, {})["WANDB_RUN_ID"] == run_id
    assert not [p for p in run.path.rglob("*") if p.is_file() and SENTINEL.encode() in p.read_bytes()]


def fake_python(tmp_path: Path) -> Path:
    """An interpreter where no module can be found."""
    path = tmp_path / "python-without"
    path.write_text("#!/bin/sh\nexit 1\n")
    path.chmod(0o755)
    return path


def test_a_tracker_not_installed_is_refused_at_submit(tmp_path):
    py = fake_python(tmp_path)
    proc = cli("submit", "--runs-dir", str(tmp_path / "runs"), "--set", "tracking.tensorboard=true",
               "--set", f"launch.python={py}", "--", "python3", "x.py", cwd=tmp_path,
               env={"SLURM_CONF": "/nonexistent"})  # never reaches sbatch
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "tracking.tensorboard" in proc.stderr and str(py) in proc.stderr
    assert not (tmp_path / "runs").exists()  # refused before a run directory exists


def test_installed_trackers_pass_and_containers_are_not_asked(tmp_path, monkeypatch):
    monkeypatch.setattr(tracking, "_has_module", lambda python, name: name == "wandb")
    tracking.check_installed(load_profile("local", ["tracking.wandb=true"]))
    with pytest.raises(ConfigError, match="tensorboard is not installed"):
        tracking.check_installed(load_profile("local", ["tracking.tensorboard=true"]))
    tracking.check_installed(load_profile("local", ["tracking.tensorboard=true", "container.runtime=pyxis",
                                                    "container.image=img"]))


def test_runs_shows_a_tracking_column_only_when_a_run_tracks(tmp_path):
    from slurmtrain.runs.submit import prepare

    job = JobSpec(command=("python3", "x.py"), job_name="plain")
    prepare(load_profile("local"), job, tmp_path / "runs", cwd=tmp_path)
    env = {"SLURM_CONF": "/nonexistent"}  # state from the run directories
    assert "TRACKING" not in cli("runs", "--runs-dir", "runs", cwd=tmp_path, env=env).stdout
    run = prepare(load_profile("local", ["tracking.wandb=true", "tracking.tensorboard=true"]),
                  JobSpec(command=("python3", "x.py"), job_name="tracked"), tmp_path / "runs", cwd=tmp_path)
    out = cli("runs", "--runs-dir", "runs", cwd=tmp_path, env=env).stdout
    run_id = (run.path / tracking.RUN_ID_FILE).read_text().strip()
    assert "TRACKING" in out.splitlines()[0] and f"wandb offline {run_id}, tensorboard" in out, out


def test_status_rows_and_sync_line(tmp_path):
    run = tmp_path / "r1"
    for stamp in ("20260101_000002", "20260101_000001"):
        (run / "wandb" / f"offline-run-{stamp}-abc12345").mkdir(parents=True)
    entry = {"wandb": {"run_id": "abc12345", "project": "p", "entity": None, "mode": "offline"},
             "tensorboard": str(run / "tensorboard")}
    rows = dict(tracking.describe(run, {"tracking": entry}))
    assert rows["wandb"].startswith("offline run abc12345 (project p): 2 folder(s)")
    assert rows["sync"].startswith(f"slurmtrain sync {run}") and "wandb sync --id abc12345 -p p" in rows["sync"]
    assert rows["tb"] == f"tensorboard --logdir {run / 'tensorboard'}"
    argv = tracking.sync_command(run, entry)
    assert argv[-2:] == [str(run / "wandb" / f"offline-run-{s}-abc12345") for s in ("20260101_000001",
                                                                                     "20260101_000002")]
    online = {"wandb": {**entry["wandb"], "mode": "online", "entity": "team"}}
    assert dict(tracking.describe(run, {"tracking": online}))["wandb"] == "https://wandb.ai/team/p/runs/abc12345"
    assert tracking.describe(run, {}) == []


def test_each_point_of_a_sweep_is_a_wandb_run_of_its_own_and_sync_takes_them_all(tmp_path):
    """Each point's start draws its W&B id in its own run directory: the sweep's manifest now
    records each point's, status of the sweep points to them, and `sync SWEEP` uploads every
    point's offline folders (it said the sweep had none)."""
    from slurmtrain import sweep
    from slurmtrain.runs.submit import prepare

    loaded = load_profile("local", ["tracking.wandb=true"])
    job = JobSpec(command=("python3", "x.py", "--lr", "{lr}"), job_name="sw",
                  sweep=tuple(sweep.points_of(("lr=1,2",), None)), array=2)
    run = prepare(loaded, job, tmp_path / "runs", cwd=tmp_path)
    ids = []
    for label in ("lr=1", "lr=2"):
        point = run.path / "points" / label
        run_id = (point / tracking.RUN_ID_FILE).read_text().strip()
        assert json.loads((point / "manifest.json").read_text())["tracking"]["wandb"]["run_id"] == run_id
        (point / "wandb" / f"offline-run-20260101_000001-{run_id}").mkdir(parents=True)
        ids.append(run_id)
    assert len(set(ids)) == 2
    rows = dict(tracking.describe(run.path, run.manifest()))
    assert rows["wandb"].startswith("one offline W&B run per point (2), project sw") and "sync" in rows
    out = cli("sync", "--dry-run", str(run.path), cwd=tmp_path, env={"SLURM_CONF": "/nonexistent"})
    assert out.returncode == 0, out.stderr
    assert [line.split()[3] for line in out.stdout.splitlines()] == ids  # wandb sync --id ID, a point a line
