"""What a user types that the commands cannot do says so in one line: paths that cannot be
written, a picture format matplotlib lacks, a sweep's point named by the sweep's name, a
sweep given to `watch`, an empty data.path."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from slurmtrain import events
from slurmtrain.cli import main
from slurmtrain.runs import rundir


def _sweep(root):
    run = rundir.create(root, "lrs")
    points = [{"task": 0, "label": "lr=1e-3", "values": {"train.lr": 1e-3}},
              {"task": 1, "label": "lr=3e-4", "values": {"train.lr": 3e-4}}]
    run.update_manifest(name=run.name, job_ids=["9"], submitted_at="2026-01-01T00:00:00",
                        sweep={"keys": ["train.lr"], "points": points, "max_parallel": None})
    for p in points:
        point = rundir.RunDir(run.path / rundir.POINTS / p["label"])
        (point.path / "logs").mkdir(parents=True)
        point.update_manifest(name=p["label"], job_ids=[f"9_{p['task']}"], array_task=p["task"])
        (point.path / "metrics.jsonl").write_text('{"step": 3, "total_steps": 10, "loss": 2.0, "step_time": 0.1}\n')
    return run


def test_a_path_that_cannot_be_written_is_one_line_not_a_traceback(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("")
    result = CliRunner().invoke(main, ["demo-corpus", str(tmp_path / "afile" / "c.jsonl"), "--max-mb", "0.1"])
    said = result.stderr.splitlines()  # "gathering ..." first, then the error
    assert result.exit_code == 1 and said[-1].startswith(f"slurmtrain: error: {tmp_path}/afile") \
        and "Traceback" not in result.output, result.output  # a file where a folder must be made
    run = tmp_path / "run"
    run.mkdir()
    events.append(run, "started")
    result = CliRunner().invoke(main, ["plot", str(run), "-o", str(tmp_path / "nodir" / "x.png")])
    assert result.exit_code == 1 and result.output.startswith(f"slurmtrain: error: {tmp_path}/nodir/x.png: "), \
        result.output
    result = CliRunner().invoke(main, ["plot", str(run), "-o", "x.jpgg"])
    assert result.exit_code == 2 and "-o x.jpgg: a picture's name ends in .png" in result.output, result.output


def test_a_sweeps_point_is_named_by_the_sweeps_name_and_watch_asks_for_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sweep = _sweep(tmp_path / "runs")
    result = CliRunner().invoke(main, ["watch", "--once", "lrs/points/lr=3e-4"])
    assert result.exit_code == 0 and result.output.startswith("step 3/10"), result.output
    result = CliRunner().invoke(main, ["watch", "--once", f"{sweep.name}/points/lr=9"])
    assert result.exit_code == 2 and f"run {sweep.name} has no point 'lr=9' (its points: lr=1e-3, lr=3e-4)" \
        in result.output, result.output
    result = CliRunner().invoke(main, ["watch", "lrs"])  # it never ended: its metrics are its points'
    assert result.exit_code == 2 and f"{sweep.name} is a sweep: watch one of its points" in result.output, \
        result.output


def test_an_empty_data_path_is_refused_it_would_be_the_current_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    recipe = (Path(__file__).resolve().parents[2] / "configs" / "recipes" / "tiny-demo.toml").read_text()
    assert 'path = "demo/corpus.jsonl"' in recipe
    (tmp_path / "r.toml").write_text(recipe.replace('path = "demo/corpus.jsonl"', 'path = ""'))
    result = CliRunner().invoke(main, ["gen", "--recipe", str(tmp_path / "r.toml")])
    assert result.exit_code == 2 and "data.path: expected a corpus file or folder, got ''" in result.output, \
        result.output
