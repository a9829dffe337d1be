"""watch, plot and demo-corpus through the CLI, on a metrics file shaped like the trainer's."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from slurmtrain import events
from slurmtrain.cli import main


def fake_run(tmp_path, steps=30, total=100):
    run = tmp_path / "run"
    run.mkdir()
    with (run / "metrics.jsonl").open("w") as fh:
        for s in range(1, steps + 1):
            fh.write(json.dumps({"step": s, "total_steps": total, "loss": 5 - s / 10,
                                 "lr": 1e-3, "tokens_per_s": 1000.0, "step_time": 2.0}) + "\n")
            if s % 10 == 0:
                fh.write(json.dumps({"step": s, "eval_loss": 5.2 - s / 10}) + "\n")
        fh.write('{"step": 31, "loss"')  # a line cut short by a killed job
    return run


def test_watch_once(tmp_path):
    run = fake_run(tmp_path)
    result = CliRunner().invoke(main, ["watch", str(run), "--once"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == ("step 30/100 (30%) | loss 2.0000 | eval 2.2000 | "
                                     "1,000 tok/s | ETA 2m20s")


def test_watch_of_a_stopped_run_waiting_to_start_again_says_so_not_a_stale_eta(tmp_path):
    run = fake_run(tmp_path)
    for name, fields in (("submitted", {"job_id": "7"}), ("started", {"job_id": "7", "restart": 0}),
                         ("checkpoint_saved", {"step": 30}), ("stopped", {"step": 30}),
                         ("requeue", {"job_id": "7", "restart": 0, "exit_code": 75})):
        events.append(run, name, **fields)
    result = CliRunner().invoke(main, ["watch", str(run), "--once"])
    assert result.exit_code == 0 and "waiting in the queue to start again" in result.output, result.output
    assert "ETA" not in result.output, result.output


def test_watch_of_the_built_in_trainer_before_its_first_step_says_no_program_note(tmp_path):
    from slurmtrain.runs import rundir
    run = rundir.create(tmp_path, "tiny")
    run.update_manifest(name=run.name, recipe="tiny-demo", command=[], job_ids=["7"])
    result = CliRunner().invoke(main, ["watch", str(run.path), "--once"])
    assert result.output == "not started yet; the trainer's metrics come with its first steps\n", result.output
    events.append(run.path, "submitted", job_id="7")
    result = CliRunner().invoke(main, ["watch", str(run.path), "--once"])
    assert result.exit_code == 0 and result.output.rstrip().endswith("submitted as job 7"), result.output


def test_watch_stops_when_the_run_finished(tmp_path):
    run = fake_run(tmp_path)
    events.append(run, "finished", step=30)
    result = CliRunner().invoke(main, ["watch", str(run), "--interval", "0.1"])
    assert result.exit_code == 0 and result.output.strip().endswith("finished")


def test_watch_missing_run(tmp_path):
    result = CliRunner().invoke(main, ["watch", str(tmp_path / "nope"), "--once"])
    assert result.exit_code == 2 and "no such run directory" in result.output


def test_plot_writes_a_png(tmp_path):
    run = fake_run(tmp_path)
    out = tmp_path / "m.png"
    result = CliRunner().invoke(main, ["plot", str(run), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 20_000


@pytest.mark.slow  # builds the demo corpus: about 3.5 s
def test_demo_corpus(tmp_path):
    out = tmp_path / "demo" / "corpus.jsonl"
    result = CliRunner().invoke(main, ["demo-corpus", str(out), "--max-mb", "0.2"])
    assert result.exit_code == 0, result.output
    assert f"gathering up to 0.2 MB of text on this machine into {out}..." in result.stderr  # it takes seconds
    again = CliRunner().invoke(main, ["demo-corpus", str(out), "--max-mb", "0.2"])
    assert "(replacing the one there)" in again.stderr, again.stderr
    docs = [json.loads(line)["text"] for line in out.read_text().splitlines()]
    assert len(docs) > 10 and sum(map(len, docs)) > 150_000


def test_watch_stops_and_fails_when_the_run_ends_without_finishing(tmp_path):
    from click.testing import CliRunner

    from slurmtrain import events
    from slurmtrain.cli import main
    (tmp_path / "metrics.jsonl").write_text('{"step": 4, "total_steps": 10, "loss": 3.0, "step_time": 0.1}\n')
    events.append(tmp_path, "started")
    events.append(tmp_path, "failed", exit_code=1)
    result = CliRunner().invoke(main, ["watch", str(tmp_path), "--interval", "0.1"])
    assert result.exit_code == 1 and "ended: user error" in result.output  # the outcome status gives
    events.append(tmp_path, "resubmitted", job_id="7")  # a later start carries on: not ended
    result = CliRunner().invoke(main, ["watch", str(tmp_path), "--once"])
    assert result.exit_code == 0 and "waiting in the queue" in result.output, result.output  # not step 4's ETA


def test_watch_and_logs_default_to_the_latest_run_and_once_fails_for_a_failed_one(tmp_path, monkeypatch):
    from slurmtrain.runs import rundir
    monkeypatch.chdir(tmp_path)
    old, new = rundir.create(tmp_path / "runs", "old"), rundir.create(tmp_path / "runs", "new")
    old.update_manifest(name=old.name, job_ids=["1"], submitted_at="2026-01-01T00:00:00")
    new.update_manifest(name=new.name, job_ids=["2"], submitted_at="2026-01-02T00:00:00")
    (old.path / "metrics.jsonl").write_text('{"step": 4, "total_steps": 10, "loss": 3.0, "step_time": 0.1}\n')
    events.append(new.path, "started")
    refused = rundir.create(tmp_path / "runs", "refused")  # newer, but sbatch refused its job: not meant
    refused.update_manifest(name=refused.name, state="refused", submitted_at="2026-01-03T00:00:00")
    result = CliRunner().invoke(main, ["watch", "--once"])  # the latest: no metrics from a program of one's own
    assert result.exit_code == 0 and "(no metrics: " in result.output and "logs -f" in result.output, result.output
    (new.logs / "job-2.out").write_text("hello from the latest run\n")
    result = CliRunner().invoke(main, ["logs"])
    assert result.exit_code == 0 and "hello from the latest run" in result.output, result.output
    events.append(new.path, "failed", exit_code=1)
    result = CliRunner().invoke(main, ["watch", "--once"])
    assert result.exit_code == 1 and "ended: user error" in result.output, result.output
    doctor = rundir.create(tmp_path / "runs", "doctor")  # doctor's checks are runs too: not the one meant
    doctor.update_manifest(name=doctor.name, job_name="doctor", job_ids=["3"], submitted_at="2026-01-03T00:00:00")
    result = CliRunner().invoke(main, ["logs"])
    assert "hello from the latest run" in result.output, result.output


def test_watch_follows_a_program_without_metrics_by_its_events_a_line_per_change(tmp_path, monkeypatch):
    """A program of the user's writes no metrics: watch says the history's latest line and
    the latest checkpoint, and into a log or a pipe only when that changes."""
    from slurmtrain.cli import progress as progress_cli
    events.append(tmp_path, "submitted", job_id="7")
    events.append(tmp_path, "started", job_id="7", restart=0, nodes="stnode1 stnode2")
    events.append(tmp_path, "checkpoint_saved", job_id="7", restart=0, step=40)
    once = CliRunner().invoke(main, ["watch", str(tmp_path), "--once"])
    assert once.exit_code == 0 and "last checkpoint at step 40 (no metrics: " in once.output, once.output
    naps = []

    def nap(seconds):
        naps.append(seconds)
        if len(naps) == 2:
            events.append(tmp_path, "checkpoint_saved", job_id="7", restart=0, step=50)
        if len(naps) == 4:
            events.append(tmp_path, "finished", job_id="7", restart=0, exit_code=0)  # the script's end
        if len(naps) > 10:  # never ended: leave as Ctrl-C would, and fail below
            raise KeyboardInterrupt
    monkeypatch.setattr(progress_cli.time, "sleep", nap)
    result = CliRunner().invoke(main, ["watch", str(tmp_path), "--interval", "1"])
    lines = result.output.splitlines()
    assert result.exit_code == 0 and len(naps) == 4, (naps, result.output)
    assert len(lines) == 3 and "step 40" in lines[0] and "step 50" in lines[1], lines  # 5 polls, 3 changes
    assert "(no metrics: " in lines[0] and "no metrics" not in lines[1], lines  # said once
    assert lines[2].startswith("no metrics; finished"), lines


def test_no_runs_here_says_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["status"])
    assert result.exit_code == 2 and f"no runs under {tmp_path / 'runs'}; name a run or a job id, or give " \
        "--runs-dir" in result.output, result.output


def test_a_save_is_left_out_of_the_step_time_and_the_steps_before_it_kept(monkeypatch):
    """The trainer's meter (train/metrics.Throughput): a save or an evaluation in the middle
    of a log window costs no step time, and the steps before it still count (a slow stretch
    just before a save was once dropped with them)."""
    import time as time_mod

    from slurmtrain.train import metrics

    now = [100.0]
    monkeypatch.setattr(time_mod, "perf_counter", lambda: now[0])
    meter = metrics.Throughput()
    for seconds in (3.0, 3.0):            # two slow steps
        now[0] += seconds
        meter.add(tokens=10, samples=1)
    saving = now[0]
    now[0] += 50.0                        # the save
    meter.skip(saving)
    for seconds in (1.0, 1.0):            # two at the usual pace
        now[0] += seconds
        meter.add(tokens=10, samples=1)
    tok_s, samples_s, step_time = meter.rates()
    assert step_time == 2.0 and tok_s == 5.0 and samples_s == 0.5


def test_watch_says_how_many_more_starts_the_eta_needs_at_the_jobs_time_limit(tmp_path):
    """A long run under a short limit: its ETA is training time; the starts it still needs
    (each with its wait in the queue) are said beside it."""
    import time

    run = fake_run(tmp_path)  # step 30 of 100 at 2 s a step: 140 s to go
    (run / "profile.toml").write_text('[slurm]\ntime = "1"\n')  # 60 s a job
    events.append(run, "started", job_id="5", restart=0, nodes="n1", when=time.time() - 30)
    once = CliRunner().invoke(main, ["watch", str(run), "--once"])
    assert "ETA 2m20s of training, 2 more starts at the job's time limit" in once.output, once.output
    (run / "profile.toml").write_text('[slurm]\ntime = "10"\n')  # this job will do
    once = CliRunner().invoke(main, ["watch", str(run), "--once"])
    assert once.output.rstrip().endswith("ETA 2m20s"), once.output
