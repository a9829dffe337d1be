"""`slurmtrain plot`'s timeline (runs/goodput_plot.py): the drawing as data, and the PNG
for a run with metrics and for one with events only."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from slurmtrain import events
from slurmtrain.cli import main
from slurmtrain.runs import goodput, goodput_plot

from runs_fakes import recorded_run

PNG = b"\x89PNG\r\n\x1a\n"


def test_the_layout_has_a_bar_per_span_a_mark_per_fault_and_a_legend_of_the_parts_present(tmp_path):
    run, _ = recorded_run(tmp_path, "crash_hang_preempted")
    g = goodput.of_events(events.read(run.path))
    lay = goodput_plot.layout(g)
    assert len(lay.bars) == len([s for s in g.spans if s.end > s.begin])
    assert lay.bars[0].part == "queue" and lay.bars[0].start_min == 0 and lay.bars[0].width_min == pytest.approx(10 / 60)
    assert [b.part for b in lay.bars][1:3] == ["startup", "trained"]
    assert [m.label for m in lay.marks] == ["crash", "hang", "preempted"]
    assert lay.marks[0].at_min == pytest.approx((1795271050 - 1795271000) / 60)
    assert [w for _, w in lay.legend] == ["queue", "start-up", "trained", "checkpoints", "lost steps", "hangs",
                                         "restarts", "other"]
    assert lay.title == "goodput 51% of 0.15 node-hours"


def test_plot_writes_the_timeline_for_a_run_without_metrics(tmp_path, fake_slurm):
    pytest.importorskip("matplotlib")
    run, _ = recorded_run(tmp_path, "crash_hang_preempted")
    out = tmp_path / "run.png"
    result = CliRunner().invoke(main, ["plot", "--runs-dir", str(tmp_path), run.name, "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == PNG


def test_plot_with_metrics_and_events_draws_both(tmp_path, fake_slurm):
    pytest.importorskip("matplotlib")
    import json
    run, _ = recorded_run(tmp_path, "crash_hang_preempted")
    (run.path / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "loss": 5 - s / 10, "lr": 1e-3,
                                                                 "tokens_per_s": 1000}) + "\n" for s in range(1, 30)))
    out = tmp_path / "both.png"
    result = CliRunner().invoke(main, ["plot", "--runs-dir", str(tmp_path), run.name, "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == PNG


def test_plot_of_a_run_with_nothing_yet_says_so(tmp_path):
    from slurmtrain.runs import rundir
    run = rundir.create(tmp_path, "empty")
    result = CliRunner().invoke(main, ["plot", str(run.path), "-o", str(tmp_path / "x.png")])
    assert result.exit_code == 2 and "nothing to plot yet" in result.output


def test_plot_of_a_refused_or_waiting_run_says_why_there_is_nothing(tmp_path):
    from slurmtrain import events
    from slurmtrain.runs import rundir
    refused = rundir.create(tmp_path, "refused")
    events.append(refused.path, "submit_refused", message="Invalid partition name specified")
    result = CliRunner().invoke(main, ["plot", str(refused.path), "-o", str(tmp_path / "x.png")])
    assert result.exit_code == 2 and result.output.rstrip().endswith(
        "nothing to plot yet: sbatch refused its job (Invalid partition name specified)"), result.output
    waiting = rundir.create(tmp_path, "waiting")
    events.append(waiting.path, "submitted", job_id="7")
    result = CliRunner().invoke(main, ["plot", str(waiting.path), "-o", str(tmp_path / "y.png")])
    assert result.exit_code == 2 and "nothing to plot yet: its job has not started" in result.output, result.output
    assert not (tmp_path / "x.png").exists() and not (tmp_path / "y.png").exists()


def test_plot_of_a_sweep_whose_points_have_no_metrics_says_so_and_writes_nothing(tmp_path):
    from slurmtrain.runs import rundir
    sweep = rundir.create(tmp_path, "sw")
    sweep.update_manifest(array=2, sweep={"keys": ["lr"], "points": [{"task": 0, "label": "lr=1", "values": {}},
                                                                      {"task": 1, "label": "lr=2", "values": {}}]})
    for label in ("lr=1", "lr=2"):
        (sweep.path / "points" / label).mkdir(parents=True)
    result = CliRunner().invoke(main, ["plot", str(sweep.path), "-o", str(tmp_path / "s.png")])
    assert result.exit_code == 2 and "no point has metrics yet" in result.output and "stop.metrics" in result.output
    assert not (tmp_path / "s.png").exists()


def test_plot_without_a_run_draws_the_latest_as_status_logs_and_watch_do(tmp_path):
    pytest.importorskip("matplotlib")
    recorded_run(tmp_path, "crash_hang_preempted")
    out = tmp_path / "latest.png"
    result = CliRunner().invoke(main, ["plot", "--runs-dir", str(tmp_path), "-o", str(out)])
    assert result.exit_code == 0 and out.read_bytes()[:8] == PNG, result.output
