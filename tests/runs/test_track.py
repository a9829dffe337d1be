"""Run states: Slurm's answer (one query for many runs), else the run's events.jsonl."""

import json
import time
from datetime import datetime

from click.testing import CliRunner

from slurmtrain import events
from slurmtrain.cli import main
from slurmtrain.runs import rundir, slurmquery, track
from slurmtrain.runs.states import JobState

from runs_fakes import RECORDED


def _run(root, name, job_id, evs=()):
    run = rundir.create(root, name)
    run.update_manifest(name=run.name, job_ids=[job_id], state="submitted", nodes=2,
                        submitted_at=f"2025-01-01T00:00:{int(job_id) % 60:02d}")
    for ev, fields in evs:
        events.append(run.path, ev, **fields)
    return run


def test_status_of_100_runs_is_one_query(tmp_path, fake_slurm):
    scontrol = "\n".join(f"JobId={i} JobState=RUNNING Restarts=0 ExitCode=0:0 RunTime=00:01:00 "
                         f"NodeList=stnode[1-2] NumNodes=2" for i in range(1000, 1100))
    fake = fake_slurm(scontrol=scontrol, sacct=None)
    runs = [_run(tmp_path, "r", str(1000 + i)) for i in range(100)]
    got = track.statuses(runs)
    assert {st.state for st in got} == {JobState.RUNNING}
    # one sacct call (learns that accounting is off) and one scontrol call, for 100 runs
    assert (fake.count("sacct"), fake.count("scontrol")) == (1, 1)

    fake_slurm(scontrol=scontrol, sacct="".join(
        f"{i}|RUNNING|0:0|2|stnode[1-2]|00:01:00|2025-01-01T00:00:00|None\n" for i in range(1000, 1100)))
    from slurmtrain.runs import jobs
    jobs.TrackedJob.watcher = jobs.Watcher()
    result = CliRunner().invoke(main, ["runs", "--runs-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert len(result.output.splitlines()) == 101


def test_forgotten_jobs_take_their_state_from_events(tmp_path, fake_slurm):
    fake_slurm(scontrol="", sacct=None)
    ok = _run(tmp_path, "ok", "21", [("started", {"job_id": "21", "restart": 0, "nodes": "stnode1 stnode2"}),
                                     ("finished", {"job_id": "21", "restart": 0, "exit_code": 0})])
    bad = _run(tmp_path, "bad", "22", [("started", {"job_id": "22", "restart": 1, "nodes": "stnode1"}),
                                       ("failed", {"job_id": "22", "restart": 1, "exit_code": 3})])
    lost = _run(tmp_path, "lost", "23", [("started", {"job_id": "23", "restart": 0, "nodes": "stnode1"})])
    a, b, c = track.statuses([ok, bad, lost])
    assert (a.state, a.exit_code, a.source, a.nodelist) == (JobState.COMPLETED, 0, "events.jsonl", "stnode1 stnode2")
    assert (b.state, b.exit_code, b.restarts) == (JobState.FAILED, 3, 1)
    assert "no longer knows job 22" in b.note
    assert c.state is JobState.UNKNOWN and "records no end" in c.note
    gone = _run(tmp_path, "gone", "24", [("started", {"job_id": "24", "restart": 0}),
                                         ("cancel_requested", {"job_id": "24"}),
                                         ("signal", {"job_id": "24", "restart": 0, "signal": "TERM"})])
    assert track.statuses([gone])[0].state is JobState.CANCELLED


def test_a_job_slurm_shows_signaling_after_its_events_ended_takes_the_events_end(tmp_path, fake_slurm):
    # Slurm 24.11 once showed an ended job SIGNALING for minutes (a flag that hides its state).
    line = "JobId={} JobState=SIGNALING Restarts=1 ExitCode=0:0 RunTime=00:01:00 NodeList=stnode1 NumNodes=1"
    fake_slurm(scontrol="\n".join(line.format(j) for j in (31, 32)), sacct=None)
    ended = _run(tmp_path, "ended", "31", [("started", {"job_id": "31", "restart": 1, "nodes": "stnode1"}),
                                           ("failed", {"job_id": "31", "restart": 1, "exit_code": 3})])
    running = _run(tmp_path, "running", "32", [("started", {"job_id": "32", "restart": 0, "nodes": "stnode1"})])
    a, b = track.statuses([ended, running])
    assert (a.state, a.exit_code, a.source) == (JobState.FAILED, 3, "events.jsonl")
    assert "still shows job 31 SIGNALING" in a.note
    # No end in its events: a signal in flight to a running job, Slurm's word stands.
    assert (b.state, b.source, b.note) == (JobState.SIGNALING, "scontrol", None)


def test_program_exit_code_from_torchrun_summary(tmp_path, fake_slurm):
    fake_slurm(scontrol=(RECORDED / "scontrol_show_job.txt").read_text(), sacct=None)
    run = _run(tmp_path, "fail", "12")
    (run.logs / "job-12.out").write_text("srun: error: stnode1: task 0: Exited with exit code 1\n")
    (run.logs / "12-stnode1.out").write_text((RECORDED / "torchrun_failure.txt").read_text())
    (st,) = track.statuses([run])
    assert (st.exit_code, st.program_exit_code) == (3, 3)


def test_slurm_wins_over_events(tmp_path, fake_slurm):
    fake_slurm(scontrol=(RECORDED / "scontrol_show_job.txt").read_text(), sacct=None)
    run = _run(tmp_path, "fail", "12", [("started", {"job_id": "12", "restart": 0, "nodes": "x"})])
    (st,) = track.statuses([run])
    assert (st.state, st.source, st.exit_code, st.nodelist) == (JobState.FAILED, "scontrol", 3, "stnode[1-2]")


def test_refused_run_needs_no_query(tmp_path, fake_slurm):
    fake = fake_slurm()
    run = rundir.create(tmp_path, "ref")
    run.update_manifest(state="refused", refusal="sbatch: error: Invalid partition name specified", job_ids=[])
    (st,) = track.statuses([run])
    assert st.state is JobState.REFUSED and "Invalid partition" in st.note
    assert fake.calls == []


def test_status_cli_shows_failing_node_log(tmp_path, fake_slurm):
    fake_slurm(scontrol=(RECORDED / "scontrol_show_job.txt").read_text(), sacct=None)
    run = _run(tmp_path, "fail", "12", [("submitted", {"job_id": "12"}),
                                        ("failed", {"job_id": "12", "restart": 0, "exit_code": 3})])
    (run.logs / "job-12.out").write_text("srun: error: stnode2: task 1: Exited with exit code 3\n")
    (run.logs / "12-stnode1.out").write_text("fine\n")
    (run.logs / "12-stnode2.out").write_text("".join(f"line {i}\n" for i in range(50)) + "Boom: exit 3\n")
    result = CliRunner().invoke(main, ["status", "--runs-dir", str(tmp_path), "fail"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "FAILED" in out and "exit code  3" in out and "failed" in out
    assert "last lines of stnode2's log" in out and "Boom: exit 3" in out
    assert "line 20" not in out and "stnode1's log" not in out
    for n, said in ((0, []), (1, ["  Boom: exit 3"])):  # -n 0: none (it was every line)
        out = CliRunner().invoke(main, ["status", "--runs-dir", str(tmp_path), "-n", str(n), "fail"]).output
        assert [line for line in out.splitlines() if line.startswith("  ") and "exit 3" in line
                or line.startswith("  line ")] == said, out
        assert ("last lines of" in out) is bool(said), out
    result = CliRunner().invoke(main, ["status", "--runs-dir", str(tmp_path), "--json", "fail", "13"])
    first, second = (json.loads(line) for line in result.output.splitlines())
    assert (first["state"], first["exit_code"], second["job_id"], second["state"]) == ("FAILED", 3, "13", "RUNNING")


def test_logs_and_cancel(tmp_path, fake_slurm):
    fake = fake_slurm(scontrol="JobId=31 JobState=RUNNING Requeue=1 Restarts=0", sacct=None)
    run = _run(tmp_path, "l", "31")
    (run.logs / "job-31.out").write_text("batch says hi\n")
    (run.logs / "31-stnode1.out").write_text("node one\n")
    result = CliRunner().invoke(main, ["logs", "--runs-dir", str(tmp_path), "l"])
    assert "batch says hi" in result.output and "node one" in result.output
    result = CliRunner().invoke(main, ["logs", "--runs-dir", str(tmp_path), "l", "--node", "stnode1"])
    assert result.output == "node one\n"
    result = CliRunner().invoke(main, ["logs", "--runs-dir", str(tmp_path), "l", "--node", "stnode9"])
    assert result.exit_code == 2 and "stnode1" in result.output
    result = CliRunner().invoke(main, ["cancel", "--runs-dir", str(tmp_path), "l"])
    assert result.exit_code == 0
    # not requeueable first, so the script's stop handling cannot bring the job back
    assert fake.calls[-2:] == [["scontrol", "update", "JobId=31", "Requeue=0"], ["scancel", "31"]]
    assert events.read(run.path)[-1]["event"] == "cancel_requested"


def test_cancel_of_a_run_a_chain_waits_for_says_slurm_cancels_the_waiting_runs(tmp_path, fake_slurm):
    from slurmtrain import dependents

    fake_slurm(scontrol="JobId=41 JobState=RUNNING Requeue=1 Restarts=0", sacct=None)
    up = _run(tmp_path, "up", "41")
    waiting, ran = _run(tmp_path, "down", "42"), _run(tmp_path, "done", "40", [("started", {"job_id": "40"})])
    dependents.add(up.path, waiting.name, str(waiting.path), "afterok")
    dependents.add(up.path, ran.name, str(ran.path), "afterok")  # an older link that has run: not said
    result = CliRunner().invoke(main, ["cancel", "--runs-dir", str(tmp_path), up.name])
    assert result.exit_code == 0, result.output
    assert f"runs waiting for it to complete ({waiting.name}) are cancelled by Slurm too" in result.output


def test_follow_stops_when_finished(tmp_path):
    import io

    log = tmp_path / "a.out"
    log.write_text("one\ntw")
    calls = []

    def finished():
        calls.append(1)
        if len(calls) == 1:
            with open(log, "a") as f:
                f.write("o\nthree\n")
        return len(calls) >= 2

    out = io.StringIO()
    track.follow(lambda: [("a", log)], finished, out, poll_s=0.01, check_every_s=0.0)
    assert out.getvalue() == "[a] one\n[a] two\n[a] three\n"


def test_a_requeued_job_held_by_slurm_says_the_hold_ends_by_itself(tmp_path, fake_slurm):
    line = "JobId=41 JobState=PENDING Reason=BeginTime Restarts={} ExitCode=0:0 RunTime=00:00:00 NumNodes=1"
    fake_slurm(scontrol=line.format(1), sacct=None)
    _run(tmp_path, "held", "41")
    out = CliRunner().invoke(main, ["status", "--runs-dir", str(tmp_path)]).output
    assert "reason: BeginTime (Slurm holds a requeued job for about two minutes before it may start again)" in out, out
    fake_slurm(scontrol=line.format(0), sacct=None)  # never requeued: a begin time the user asked for
    out = CliRunner().invoke(main, ["status", "--runs-dir", str(tmp_path)]).output
    assert "reason: BeginTime" in out and "holds a requeued job" not in out, out


def test_status_of_a_resubmitted_run_says_its_first_submission_and_how_many_jobs(tmp_path, fake_slurm):
    """Slurm's requeue count and submit time are the current job's: after a resubmission
    they start again, so the run's own figures are said beside them."""
    fake_slurm(scontrol="JobId=9 JobState=RUNNING Restarts=0 ExitCode=0:0 RunTime=00:01:00 NodeList=stnode1 "
                        "NumNodes=1", sacct=None)
    run = _run(tmp_path, "lap", "9", [("submitted", {"job_id": "7"}),
                                      ("started", {"job_id": "7", "restart": 0, "nodes": "stnode1"}),
                                      ("submitted", {"job_id": "9"}),  # a resubmission writes both
                                      ("resubmitted", {"job_id": "9", "previous_job_id": "7"}),
                                      ("started", {"job_id": "9", "restart": 0, "nodes": "stnode1"})])
    out = CliRunner().invoke(main, ["status", str(run.path)]).output
    rows = {line[:10].strip(): line[10:].strip() for line in out.splitlines() if line[:10].strip()}
    assert rows["requeues"] == "0 in job 9, the run's latest of 2 jobs (1 resubmission)", out
    assert rows["submitted"].endswith("(job 7); job 9 at 2025-01-01 00:00:09"), out
    single = _run(tmp_path, "one", "9", [("submitted", {"job_id": "9"})])
    rows = {line[:10].strip(): line[10:].strip() for line in CliRunner().invoke(main, ["status", str(single.path)])
            .output.splitlines() if line[:10].strip()}
    assert (rows["requeues"], rows["submitted"]) == ("0", "2025-01-01 00:00:09"), rows


def test_cancel_of_a_run_that_already_ended_says_so_and_succeeds(tmp_path, fake_slurm):
    fake_slurm(scontrol="", sacct=None)  # Slurm forgot the job (MinJobAge)
    run = _run(tmp_path, "done", "41", [("started", {"job_id": "41", "restart": 0}),
                                        ("finished", {"job_id": "41", "restart": 0, "exit_code": 0})])
    result = CliRunner().invoke(main, ["cancel", "--runs-dir", str(tmp_path), "done"])
    assert result.exit_code == 0, result.output
    assert f"run {run.name}: job 41 already ended (completed" in result.stderr and "nothing to cancel" in result.stderr
    assert "cancel_requested" not in (run.path / "events.jsonl").read_text()
    live = _run(tmp_path, "live", "42", [("started", {"job_id": "42", "restart": 0})])
    still = CliRunner().invoke(main, ["cancel", "--runs-dir", str(tmp_path), live.name])
    assert still.exit_code == 1 and "42" in still.output, still.output  # running by its events: Slurm's error stands


def test_a_job_no_run_records_is_slurms_view_said_so(tmp_path, fake_slurm):
    fake_slurm(scontrol="", sacct="77|COMPLETED|0:0|1|stnode1|00:00:03|2025-01-01T12:00:00|None|77\n")
    result = CliRunner().invoke(main, ["status", "77", "--runs-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "no run directory records this job" in result.output
    assert "submitted  2025-01-01 12:00:00" in result.output and "requeues   0" in result.output


def test_runs_ask_the_database_for_their_jobs_since_they_were_made(tmp_path, fake_slurm):
    """The database keeps older jobs of the same ids (a controller that lost its state
    hands them out again): a run's job is looked for from the run's creation on, a bare
    job id at any age."""
    fake = fake_slurm(scontrol="", sacct="41|RUNNING|0:0|1|stnode1|00:00:03|2025-01-01T12:00:00|None|41\n")
    run = _run(tmp_path, "r", "41")
    track.statuses([run])
    start = next(a for a in fake.calls[-1] if a.startswith("--starttime="))
    made = datetime.fromisoformat(run.manifest()["submitted_at"]).timestamp()
    assert datetime.fromisoformat(start.split("=", 1)[1]).timestamp() == made - slurmquery.SINCE_SLACK_S
    track.statuses([run, "41"])
    assert not any(a.startswith("--starttime=") for a in fake.calls[-1])


def test_logs_of_a_resubmitted_run_shows_the_latest_job_and_the_earlier_on_asking(tmp_path, fake_slurm):
    fake_slurm(scontrol="", sacct=None)
    run = _run(tmp_path, "r", "5")
    run.update_manifest(job_ids=["5", "7"])
    for name, text in (("job-5.out", "first batch\n"), ("5-stnode1.out", "Traceback: the first job's error\n"),
                       ("job-7.out", "second batch\n"), ("7-stnode2.out", "second node\n")):
        (run.logs / name).write_text(text)
    latest = CliRunner().invoke(main, ["logs", "--runs-dir", str(tmp_path), run.name])
    assert latest.exit_code == 0 and "second node" in latest.output and "first job's error" not in latest.output
    assert "--job 5, or --job all" in latest.output  # (stderr, mixed in by CliRunner)
    every = CliRunner().invoke(main, ["logs", "--runs-dir", str(tmp_path), run.name, "--job", "all"])
    assert every.output.index("first job's error") < every.output.index("second node"), every.output
    assert "==> job 5 stnode1:" in every.output
    one = CliRunner().invoke(main, ["logs", "--runs-dir", str(tmp_path), run.name, "--job", "5", "--node", "stnode1"])
    assert one.exit_code == 0 and "first job's error" in one.output and "second" not in one.output
    wrong = CliRunner().invoke(main, ["logs", "--runs-dir", str(tmp_path), run.name, "--job", "6"])
    assert wrong.exit_code == 2 and "its jobs: 5, 7" in wrong.output


def test_watch_of_a_run_cancelled_while_it_waited_to_start_again_ends(tmp_path, fake_slurm):
    """A plain scancel writes no event: watch asks Slurm about a run its events say waits in
    the queue, and ends (it never did)."""
    from slurmtrain.runs import jobs

    jobs.TrackedJob.watcher = jobs.Watcher()
    fake_slurm(scontrol="JobId=88 JobName=x JobState=CANCELLED Reason=None Requeue=1 Restarts=1 ExitCode=0:15 "
                        "RunTime=00:00:07 NodeList=stnode1 NumNodes=1", sacct=None)
    run = _run(tmp_path, "pre", "88", [("started", {"job_id": "88", "restart": 0, "nodes": "stnode1"}),
                                       ("checkpoint_saved", {"step": 120}), ("stopped", {"step": 124}),
                                       ("preempted", {"job_id": "88", "exit_code": 1}),
                                       ("requeue", {"job_id": "88", "exit_code": 1, "saved": True})])
    for once in (["--once"], ["--interval", "0.1"]):
        result = CliRunner().invoke(main, ["watch", "--runs-dir", str(tmp_path), run.name, *once])
        assert result.exit_code == 1 and "ended: cancelled" in result.output, result.output
        assert f"see `slurmtrain status {run.name} --runs-dir {tmp_path}`" in result.output, result.output
    # on a login node a laptop's --remote reached, the hint is the laptop's command
    remote = CliRunner(env={"SLURMTRAIN_VIA_REMOTE": "hpc"}).invoke(main, ["watch", "--runs-dir", str(tmp_path),
                                                                          "--once", "pr"])
    assert "see `slurmtrain --remote hpc status pr`" in remote.output, remote.output


def test_a_pending_reason_waiting_does_not_get_past_says_what_to_change(tmp_path, fake_slurm):
    fake_slurm(scontrol="JobId=51 JobState=PENDING Reason=PartitionTimeLimit Requeue=1 Restarts=0 NumNodes=2",
               sacct=None)
    run = _run(tmp_path, "long", "51")
    out = CliRunner().invoke(main, ["status", "--runs-dir", str(tmp_path), run.name]).output
    assert ("reason: PartitionTimeLimit (its time limit is above the partition's MaxTime (--time): it will not "
            "start as it is") in out, out


def test_one_process_that_polls_sees_a_job_come_back_after_a_state_submitit_takes_for_done(tmp_path, fake_slurm):
    """submitit's watcher (a class attribute: one per process) stopped asking about a job once
    its state was none of submitit's running ones, and kept that answer: a poll that met 24.11's
    SIGNALING on the way to a requeue read SIGNALING, Restarts=0, for the rest of the run (CI's
    Slurm-version lane: COMPLETED with 0 restarts after a preemption and a requeue)."""
    fake = fake_slurm(scontrol="JobId=41 JobState=SIGNALING Restarts=0 ExitCode=0:0 NodeList=stnode1 NumNodes=1",
                      sacct=None)
    run = _run(tmp_path, "back", "41", [("started", {"job_id": "41", "restart": 0, "nodes": "stnode1"})])
    assert [(s.state, s.restarts) for s in track.statuses([run])] == [(JobState.SIGNALING, 0)]
    fake.scontrol = "JobId=41 JobState=RUNNING Restarts=1 ExitCode=0:0 NodeList=stnode2 NumNodes=1"
    assert [(s.state, s.restarts, s.nodelist) for s in track.statuses([run])] == [(JobState.RUNNING, 1, "stnode2")]
    fake.scontrol = ""  # forgotten since (MinJobAge): the events say, not the last answer
    (gone,) = track.statuses([run])
    assert (gone.source, gone.restarts) == ("events.jsonl", 0), gone


def test_a_refresh_asks_about_its_own_jobs_only(tmp_path, fake_slurm):
    """A process that asked about many runs (a table, then one run's status): the next
    refresh names only the jobs it is for, not every job asked about before."""
    fake = fake_slurm(scontrol="JobId=51 JobState=RUNNING Restarts=0 ExitCode=0:0 NodeList=stnode1 NumNodes=1",
                      sacct="")
    one = _run(tmp_path, "one", "51", [("started", {"job_id": "51", "restart": 0, "nodes": "stnode1"})])
    two = _run(tmp_path, "two", "52", [("started", {"job_id": "52", "restart": 0, "nodes": "stnode1"})])
    track.statuses([one, two])
    track.statuses([one])
    asked = [c for c in fake.calls if c[0] == "sacct"][-1]
    assert "51" in " ".join(asked) and "52" not in " ".join(asked), asked


def test_preempted_on_the_way_back_to_the_queue_is_not_an_end(tmp_path, fake_slurm):
    """Slurm killed the job at the end of a preemption's GraceTime, the supervisor with it (no
    end in the events), and shows PREEMPTED until it requeues the job, seconds later: not
    ended (CI's e2e took it for the end and went on while the job came back). Ended where
    the events say the start ended, or when nothing moved for PREEMPTED_SETTLES_S."""
    from slurmtrain.runs.jobs import TrackedJob, Watcher

    TrackedJob.watcher = Watcher()
    fake_slurm(scontrol="JobId=61 JobState=PREEMPTED Reason=None Requeue=1 Restarts=0 ExitCode=0:0 "
                        "RunTime=00:01:27 NodeList=stnode1 NumNodes=1", sacct=None)
    run = _run(tmp_path, "graced", "61", [("started", {"job_id": "61", "restart": 0, "nodes": "stnode1"}),
                                          ("checkpoint_saved", {"step": 5})])
    [st] = track.statuses([run])
    assert (st.state, st.ended) == (JobState.PREEMPTED, False), st
    out = CliRunner().invoke(main, ["status", "--runs-dir", str(tmp_path), run.name]).output
    assert "PREEMPTED  (from scontrol) (killed at the end of its grace time: Slurm requeues it" in out, out
    assert track.preempted_for_good(run.path, now=time.time() + track.PREEMPTED_SETTLES_S)
    events.append(run.path, "stop_unsaved", job_id="61", restart=0, exit_code=1)  # the script said: not requeued
    [st] = track.statuses([run])
    assert (st.state, st.ended) == (JobState.PREEMPTED, True), st
