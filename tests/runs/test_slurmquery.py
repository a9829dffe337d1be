"""Parsing recorded scontrol/sacct output, and the queries' cost and errors."""

import subprocess

import pytest

from slurmtrain.errors import SlurmError
from slurmtrain.runs import slurmquery
from slurmtrain.runs.slurmquery import format_duration
from slurmtrain.slurmtext import hostnames, parse_duration, parse_key_values
from slurmtrain.runs.states import JobState

from runs_fakes import RECORDED


def test_parse_scontrol_recorded():
    jobs = slurmquery.parse_scontrol((RECORDED / "scontrol_show_job.txt").read_text())
    assert set(jobs) == {"12", "13", "14", "15"}
    failed = jobs["12"]
    assert (failed.state, failed.exit_code, failed.signal) == (JobState.FAILED, 3, None)
    assert (failed.nodes, failed.nodelist, failed.elapsed_s, failed.restarts) == (2, "stnode[1-2]", 5, 0)
    assert failed.reason == "NonZeroExitCode"
    running = jobs["13"]
    assert (running.state, running.restarts, running.elapsed_s) == (JobState.RUNNING, 2, 93784)
    pending = jobs["14"]
    assert (pending.state, pending.nodes, pending.nodelist, pending.reason) == (JobState.PENDING, 2, None, "Resources")
    cancelled = jobs["15"]
    assert (cancelled.state, cancelled.exit_code, cancelled.signal) == (JobState.CANCELLED, 0, 15)


def test_parse_scontrol_no_jobs():
    assert slurmquery.parse_scontrol("No jobs in the system\n") == {}


def test_key_values_keep_spaces_and_odd_keys():
    kv = parse_key_values("JobId=1 Command=/a b/c.sh --x=1 AllocNode:Sid=h:1 TRES=cpu=4,node=2 CPUs/Task=2")
    assert kv["Command"] == "/a b/c.sh --x=1"
    assert kv["AllocNode:Sid"] == "h:1"
    assert kv["TRES"] == "cpu=4,node=2"
    assert kv["CPUs/Task"] == "2"


def test_parse_sacct_recorded_counts_requeues():
    jobs = slurmquery.parse_sacct((RECORDED / "sacct.txt").read_text())
    assert (jobs["12"].state, jobs["12"].exit_code, jobs["12"].restarts) == (JobState.FAILED, 3, 0)
    assert (jobs["13"].state, jobs["13"].restarts) == (JobState.RUNNING, 2)
    assert jobs["14"].nodelist is None
    assert (jobs["15"].state, jobs["15"].raw_state, jobs["15"].signal) == (JobState.CANCELLED, "CANCELLED by 0", 15)


def test_parse_sacct_an_ended_jobs_last_reason_to_wait_is_not_shown():
    jobs = slurmquery.parse_sacct("5|COMPLETED|0:0|1|stnode1|00:00:03|2026-11-27T21:00:00|Dependency|5\n"
                                  "6|PENDING|0:0|1|None assigned|00:00:00|2026-11-27T21:00:00|Dependency|6\n"
                                  "9|RUNNING|0:0|1|stnode1|00:00:03|2026-11-27T21:00:00|BeginTime|9\n"
                                  "7|RUNNING|0:0|1|stnode1|00:00:03|2026-11-27T21:00:00|None|7_0\n"
                                  "8|COMPLETED|0:0|1|stnode2|00:00:03|2026-11-27T21:00:00|JobArrayTaskLimit|7_1\n"
                                  "7|PENDING|0:0|1|None assigned|00:00:00|2026-11-27T21:00:00|JobArrayTaskLimit|7_2\n")
    assert (jobs["5"].reason, jobs["6"].reason, jobs["9"].reason) == (None, "Dependency", None)
    assert jobs["7"].reason == "task 2: JobArrayTaskLimit"


def test_parse_sacct_an_id_handed_out_again_is_not_a_requeue():
    """The database keeps every job; a controller that lost its saved state (the sandbox's,
    after its nodes changed) counts ids from its first again: the older job's lines are not
    this one's starts."""
    text = ("3|COMPLETED|0:0|1|stnode2|00:00:15|2026-11-27T02:31:45|None|3\n"
            "3|REQUEUED|0:0|2|stnode[1-2]|00:01:00|2026-11-27T21:09:33|None|3\n"
            "3|RUNNING|0:0|2|stnode[1-2]|00:00:20|2026-11-27T21:11:02|None|3\n"
            "4|FAILED|1:0|1|stnode1|00:00:05|2026-11-27T02:31:45|None|4\n"
            "4|PENDING|0:0|2|None assigned|00:00:00|2026-11-27T21:09:35|Priority|4\n")
    jobs = slurmquery.parse_sacct(text)
    assert (jobs["3"].state, jobs["3"].restarts) == (JobState.RUNNING, 1)
    assert (jobs["4"].state, jobs["4"].restarts, jobs["4"].nodelist) == (JobState.PENDING, 0, None)


@pytest.mark.parametrize("text, seconds", [("00:05", 5), ("01:02:03", 3723), ("1-00:00:01", 86401),
                                           ("UNLIMITED", None), ("", None)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds
    if seconds is not None:
        assert parse_duration(format_duration(seconds)) == seconds


def test_query_without_accounting_is_one_scontrol_call(fake_slurm):
    fake = fake_slurm(scontrol=(RECORDED / "scontrol_show_job.txt").read_text(), sacct=None)
    jobs = slurmquery.query(["12", "13", "99"])
    assert set(jobs) == {"12", "13"}  # 99: Slurm no longer knows it
    assert fake.count("scontrol") == 1
    # Accounting is probed once per process: the next query goes straight to scontrol.
    slurmquery.query(["12", "14"])
    assert fake.count("sacct") == 1 and fake.count("scontrol") == 2
    assert slurmquery.accounting_enabled() is False


def test_query_with_accounting_is_one_sacct_call(fake_slurm):
    fake = fake_slurm(scontrol="", sacct=(RECORDED / "sacct.txt").read_text())
    jobs = slurmquery.query([str(j) for j in (12, 13, 14, 15)])
    assert {j: i.source for j, i in jobs.items()} == dict.fromkeys(["12", "13", "14", "15"], "sacct")
    assert fake.calls == [fake.calls[0]] and fake.calls[0][0] == "sacct"
    assert "--jobs=12,13,14,15" in fake.calls[0]


def test_query_with_accounting_asks_scontrol_for_jobs_sacct_lacks(fake_slurm):
    fake = fake_slurm(scontrol=(RECORDED / "scontrol_show_job.txt").read_text(), sacct="")
    jobs = slurmquery.query(["13"])
    assert jobs["13"].source == "scontrol"
    assert fake.count("sacct") == 1 and fake.count("scontrol") == 1


def test_missing_binary_is_one_line_error(monkeypatch):
    def missing(argv, **kw):
        raise FileNotFoundError(argv[0])
    monkeypatch.setattr(slurmquery.subprocess, "run", missing)
    with pytest.raises(SlurmError, match=r"^scontrol: command not found; .*sandbox up"):
        slurmquery.scontrol_jobs()


def test_unreachable_controller(monkeypatch):
    def hang(argv, **kw):
        raise subprocess.TimeoutExpired(argv, kw["timeout"])
    monkeypatch.setattr(slurmquery.subprocess, "run", hang)
    with pytest.raises(SlurmError, match="did not answer within 30 s"):
        slurmquery.scontrol_jobs()

    def refused(argv, **kw):
        return subprocess.CompletedProcess(
            argv, 1, "", "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n")
    monkeypatch.setattr(slurmquery.subprocess, "run", refused)
    with pytest.raises(SlurmError) as err:
        slurmquery.scontrol_jobs()
    assert "\n" not in str(err.value) and "Unable to contact slurm controller" in str(err.value)


def test_each_slurm_call_is_traced_where_asked_with_its_time_and_status(monkeypatch, tmp_path):
    trace = tmp_path / "slurm-calls.log"
    monkeypatch.setenv("SLURMTRAIN_SLURM_TRACE", str(trace))
    answers = iter([subprocess.CompletedProcess(["scontrol"], 0, "", ""), subprocess.TimeoutExpired("scontrol", 30)])

    def run(argv, **kw):
        got = next(answers)
        if isinstance(got, Exception):
            raise got
        return got
    monkeypatch.setattr(slurmquery.subprocess, "run", run)
    assert slurmquery.scontrol_jobs() == {}
    with pytest.raises(SlurmError):
        slurmquery.down(["n1"])
    lines = trace.read_text().splitlines()
    assert len(lines) == 2, lines
    assert lines[0].endswith("rc=0 scontrol --oneliner show job") and lines[1].endswith(
        "rc=None scontrol --oneliner show node n1"), lines


def test_no_trace_unless_asked(monkeypatch, tmp_path):
    monkeypatch.delenv("SLURMTRAIN_SLURM_TRACE", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(slurmquery.subprocess, "run", lambda argv, **kw: subprocess.CompletedProcess(argv, 0, "", ""))
    slurmquery.scontrol_jobs()
    assert list(tmp_path.iterdir()) == []


def test_parse_scontrol_recorded_from_the_sandbox():
    """Real `scontrol -o show job` output of Slurm 22.05 (the sandbox), ten jobs."""
    jobs = slurmquery.parse_scontrol((RECORDED / "scontrol_sandbox_22.05.txt").read_text())
    assert len(jobs) == 10
    assert (jobs["1"].state, jobs["1"].exit_code, jobs["1"].nodes, jobs["1"].nodelist) == (
        JobState.COMPLETED, 0, 2, "stnode[1-2]")
    assert (jobs["5"].state, jobs["5"].exit_code) == (JobState.FAILED, 1)
    assert jobs["10"].state is JobState.CANCELLED and jobs["10"].restarts == 0
    assert jobs["7"].restarts == 1  # cancelled by a plain scancel, requeued by its script, cancelled again


@pytest.mark.parametrize("nodelist, names", [
    ("stnode2", ["stnode2"]),
    ("stnode[1-3]", ["stnode1", "stnode2", "stnode3"]),
    ("gpu[08-10,12],login", ["gpu08", "gpu09", "gpu10", "gpu12", "login"]),
    ("rack[1-2]-n[01-02]", ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"]),
    ("(null)", []),
    ("", []),
])
def test_hostlists_expand_as_scontrol_show_hostnames_does(nodelist, names, tmp_path):
    """Slurm's own expansion beside ours (scontrol needs a configuration, not a controller)."""
    import os
    import shutil

    assert hostnames(nodelist) == names
    if not names:
        return
    assert shutil.which("scontrol"), "Slurm's client is part of this project's machine (.ci/run installs it)"
    (tmp_path / "slurm.conf").write_text("ClusterName=x\nSlurmctldHost=localhost\n")
    real = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, timeout=30,
                          env={**os.environ, "SLURM_CONF": str(tmp_path / "slurm.conf")})
    assert (real.returncode, real.stdout.split()) == (0, names), real.stderr
