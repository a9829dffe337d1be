"""A job stranded by its batch host: with spares it runs with --no-kill, and when the node
that runs its batch script (the supervisor) dies, Slurm keeps it RUNNING on the other nodes
with nothing of it left running. `status` says so and `resubmit --watch` requeues it
(runs/resubmit.py). Slurm faked at the subprocess boundary; end to end on networked nodes:
tests/survival/test_network_faults_e2e.py."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from runs_fakes import recorded_run, unended_run
from slurmtrain.cli import main
from slurmtrain import events, ledger
from slurmtrain.runs import classify, resubmit, slurmquery
from slurmtrain.runs.states import JobState


def scontrol(job_id: str, state: str, host: str = "stnode1", nodes: str = "stnode[1-3]") -> str:
    return (f"JobId={job_id} JobName=x JobState={state} Reason=None Requeue=1 Restarts=0 ExitCode=0:0 "
            f"RunTime=00:05:00 NodeList={nodes} NumNodes=2 BatchHost={host} Power=")


def test_the_batch_host_of_a_running_job_is_scontrols(fake_slurm):
    fake_slurm(scontrol=scontrol("41", "RUNNING", "stnode3"))
    assert slurmquery.batch_host("41") == ("stnode3", ["stnode1", "stnode2", "stnode3"])
    fake_slurm(scontrol=scontrol("41", "PENDING", "(null)"))
    assert slurmquery.batch_host("41") is None
    fake_slurm(scontrol="")
    assert slurmquery.batch_host("41") is None  # Slurm forgot it


def test_a_running_job_is_stranded_only_when_its_batch_host_is_down(fake_slurm):
    fake = fake_slurm(scontrol=scontrol("41", "RUNNING"))
    assert resubmit.stranded("41") is None            # every node up
    fake.down = ["stnode2"]
    assert resubmit.stranded("41") is None            # another node of the job: the supervisor handles it
    fake.down = ["stnode1"]
    assert resubmit.stranded("41") == ("stnode1", "is down", JobState.RUNNING)
    assert ["scontrol", "--oneliner", "show", "node", "stnode1"] in fake.calls
    fake.scontrol = scontrol("41", "PENDING")         # requeued already: nothing to do
    assert resubmit.stranded("41") is None


def test_a_running_job_is_stranded_when_its_batch_host_came_back_out_of_its_nodes(fake_slurm):
    """Slurm 24.11 in the lane, a job of one node and a spare: its batch host killed, DOWN
    after SlurmdTimeout, then its slurmd back: the node IDLE, the job still RUNNING with
    `NodeList=stnode2 BatchHost=stnode1` 4 minutes later. A watch that asked only for DOWN
    would never requeue it."""
    fake_slurm(scontrol=scontrol("41", "RUNNING", "stnode1", "stnode2"))
    assert resubmit.stranded("41") == ("stnode1", "died and is back, out of the job's nodes", JobState.RUNNING)
    fake_slurm(scontrol=scontrol("41", "RUNNING", "stnode1", "(null)"))  # no list: nothing to tell
    assert resubmit.stranded("41") is None


# `scontrol -o show node stnode1,stnode2` on the networked sandbox, stnode1 powered off under a
# running job (the lines cut after the state): sinfo showed it "mixed*" for another 1.5 to 5
# minutes, and `sinfo -t down` did not list it (the watch never requeued the job).
NODES = ("NodeName=stnode1 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=4 CPUTot=4 CPULoad=0.21 "
         "OS=Linux 6.18.44-fc-v669 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=4096 AllocMem=0 FreeMem=20574 Sockets=4 "
         "Boards=1 State=DOWN+NOT_RESPONDING ThreadsPerCore=1 Reason=Not responding [slurm@2026-11-27T06:30:13]\n"
         "NodeName=stnode2 Arch=x86_64 CoresPerSocket=1  CPUAlloc=1 CPUEfctv=4 CPUTot=4 CPULoad=0.15 "
         "OS=Linux 6.18.44-fc-v669 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=4096 AllocMem=0 FreeMem=20579 Sockets=4 "
         "Boards=1 State=MIXED ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=\n")


def test_down_reads_each_nodes_own_state_as_scontrol_gives_it(monkeypatch):
    import subprocess
    monkeypatch.setattr(slurmquery.subprocess, "run",
                        lambda argv, **kw: subprocess.CompletedProcess(argv, 0, NODES, ""))
    assert slurmquery.down(["stnode1", "stnode2"]) == ["stnode1"]
    assert slurmquery.down(["stnode2"]) == []  # only the nodes asked about
    monkeypatch.setattr(slurmquery.subprocess, "run",
                        lambda argv, **kw: subprocess.CompletedProcess(argv, 1, "", "Node stnode9 not found"))
    assert slurmquery.down(["stnode9"]) == []


def test_the_watch_requeues_a_stranded_job_says_why_and_records_the_node(tmp_path, fake_slurm):
    run, _ = recorded_run(tmp_path, "preempted_then_completed")
    fake = fake_slurm(scontrol=scontrol("41", "RUNNING"))
    fake.down = ["stnode1"]
    said: list[str] = []
    end = resubmit.JobEnd("41", "RUNNING", None, active=True)
    assert resubmit.requeue_stranded(run, end, said.append)
    assert fake.calls[-1] == ["scontrol", "requeue", "41"]
    assert said == ["job 41: its batch host stnode1 is down, and Slurm keeps the job RUNNING (--no-kill: a job "
                    "with spares) with nothing of it left running; requeueing it"]
    assert [(e.node, e.source, e.job_id) for e in ledger.read(tmp_path)] == [("stnode1", "node_failure", "41")]
    fake.refuse_requeue = "scontrol: error: Job is no longer running"
    assert not resubmit.requeue_stranded(run, end, said.append)
    assert said[-1].startswith("job 41: the requeue failed: ") and "no longer running" in said[-1]
    assert len(ledger.read(tmp_path)) == 1


def test_status_says_a_job_is_stranded_and_how_to_requeue_it(tmp_path, fake_slurm):
    run, job = recorded_run(tmp_path, "preempted_then_completed")
    fake = fake_slurm(scontrol=scontrol(job, "RUNNING"))
    out = CliRunner().invoke(main, ["status", "--runs-dir", str(tmp_path), run.name]).output
    assert "batch host" not in out, out
    fake.down = ["stnode1"]
    out = CliRunner().invoke(main, ["status", "--runs-dir", str(tmp_path), run.name]).output
    assert (f"warning    its batch host stnode1 is down, and Slurm keeps the job RUNNING (--no-kill: a job with "
            f"spares) with nothing of it left running: `slurmtrain resubmit --watch --detach {run.name}` requeues "
            f"it (and keeps watching), or `scontrol requeue {job}`") in out, out


def test_the_watch_requeues_a_stranded_job_when_accounting_does_not_answer(tmp_path, fake_slurm, monkeypatch):
    """Seen on networked nodes: with the batch host down, sacct timed out at every poll, and a
    watch that only asked again never looked at the controller's view of the job."""
    from slurmtrain.errors import SlurmError

    run, job = recorded_run(tmp_path, "preempted_then_completed")
    fake = fake_slurm(scontrol=scontrol(job, "RUNNING"))
    fake.down = ["stnode1"]
    answers = iter([SlurmError("sacct did not answer within 30 s"), resubmit.JobEnd(job, "COMPLETED", 0, False)])

    def job_end(_run):
        got = next(answers)
        if isinstance(got, Exception):
            raise got
        return got
    monkeypatch.setattr(resubmit, "job_end", job_end)
    said: list[str] = []
    resubmit.watch(run, poll_s=1, say=said.append, sleep=lambda s: None)
    assert ["scontrol", "requeue", job] in fake.calls
    assert said[0] == "Slurm did not answer (sacct did not answer within 30 s); asking again in 1 s", said


def test_the_batch_host_of_an_ended_job_is_asked_by_its_state(fake_slurm):

    fake_slurm(scontrol=scontrol("41", "FAILED", "stnode3"))
    assert slurmquery.batch_host("41") is None                     # not RUNNING
    assert slurmquery.batch_host("41", JobState.FAILED).host == "stnode3"


def test_the_watch_requeues_a_job_slurm_ended_failed_when_its_batch_host_died(tmp_path, fake_slurm, monkeypatch):
    """Slurm 24.11: a job of one node and a spare (--no-kill), its batch host dead, ended
    FAILED with exit code 0 once the node was DOWN, no end event written (the lane's test:
    tests/e2e/test_dead_batch_host_24.py). That is the stranded job's end, not an unknown one."""
    run, job = unended_run(tmp_path)
    fake = fake_slurm(scontrol=scontrol(job, "FAILED"))
    fake.down = ["stnode1"]
    answers = iter([resubmit.JobEnd(job, "FAILED", 0, False), resubmit.JobEnd(job, "COMPLETED", 0, False)])
    monkeypatch.setattr(resubmit, "job_end", lambda _run: next(answers))
    said: list[str] = []
    assert classify.classify(run.path, "FAILED", 0).kind == classify.UNKNOWN  # where the watch stopped before
    assert resubmit.watch(run, poll_s=1, say=said.append, sleep=lambda s: None).kind == classify.COMPLETED
    assert ["scontrol", "requeue", job] in fake.calls
    assert (f"job {job}: its batch host stnode1 is down, and Slurm ended the job FAILED (--no-kill: a job with "
            "spares) with nothing of it left running; requeueing it") in said, said
    assert [(e.node, e.source) for e in ledger.read(tmp_path)] == [("stnode1", "node_failure")]


def test_a_failed_job_with_its_batch_host_up_stays_unknown_to_the_watch(tmp_path, fake_slurm, monkeypatch):
    run, job = unended_run(tmp_path)
    fake = fake_slurm(scontrol=scontrol(job, "FAILED"))
    monkeypatch.setattr(resubmit, "job_end", lambda _run: resubmit.JobEnd(job, "FAILED", 0, False))
    said: list[str] = []
    assert resubmit.watch(run, poll_s=1, say=said.append, sleep=lambda s: None).kind == classify.UNKNOWN
    assert ["scontrol", "requeue", job] not in fake.calls and not ledger.read(tmp_path)


def test_a_job_script_killed_by_sigkill_is_named_by_status_and_the_watch(tmp_path, fake_slurm):
    """ExitCode=0:9 from scontrol, through job_end and status's tracking, not "exit code 0"."""
    run, job = unended_run(tmp_path)
    fake_slurm(scontrol=scontrol(job, "FAILED").replace("ExitCode=0:0", "ExitCode=0:9"))
    killed = "unknown: Slurm says FAILED (the job script was killed by SIGKILL (out of memory, or a kill))"
    said: list[str] = []
    resubmit.watch(run, poll_s=1, say=said.append, sleep=lambda s: None)
    assert f"job {job} ended: {killed}" in said, said
    out = CliRunner().invoke(main, ["status", str(run.path)]).output
    assert killed.split(": ", 1)[1] in out, out


def watch_until_resubmitted(run, monkeypatch) -> tuple[list, list[str]]:
    """The watch, until its first resubmission (the rest is resubmit's own tests): what it
    resubmitted and what it said."""
    resubmitted: list[object] = []
    said: list[str] = []

    def resubmit_once(r, say=None):
        resubmitted.append(r)
        raise SystemExit("resubmitted")
    monkeypatch.setattr(resubmit, "resubmit", resubmit_once)
    try:
        resubmit.watch(run, poll_s=1, say=said.append, sleep=lambda s: None)
    except SystemExit:
        pass
    return resubmitted, said


def test_a_refused_requeue_of_an_ended_stranded_job_resubmits_it(tmp_path, fake_slurm, monkeypatch):
    run, job = unended_run(tmp_path)
    fake = fake_slurm(scontrol=scontrol(job, "FAILED"))
    fake.down = ["stnode1"]
    fake.refuse_requeue = f"scontrol: error: Invalid job id specified for job {job}"
    monkeypatch.setattr(resubmit, "job_end", lambda _run: resubmit.JobEnd(job, "FAILED", 0, False))
    resubmitted, said = watch_until_resubmitted(run, monkeypatch)
    assert resubmitted, said
    assert any(line.startswith(f"job {job} ended: node failure: Slurm says FAILED (exit code 0); its batch host was "
                               "down") for line in said), said



def test_status_says_a_running_watch_will_requeue_a_stranded_job(tmp_path, fake_slurm):
    import os
    import socket

    from slurmtrain.runs import watcher

    run, job = recorded_run(tmp_path, "preempted_then_completed")
    fake = fake_slurm(scontrol=scontrol(job, "RUNNING"))
    fake.down = ["stnode1"]
    with watcher.claim(run):
        out = CliRunner().invoke(main, ["status", "--runs-dir", str(tmp_path), run.name]).output
    assert (f"with nothing of it left running: the watch (pid {os.getpid()} on {socket.gethostname()}) requeues it "
            "at its next poll") in out, out


def test_status_says_a_job_ended_failed_by_its_dead_batch_host_and_how_to_requeue_it(tmp_path, fake_slurm):
    run, job = unended_run(tmp_path)
    fake = fake_slurm(scontrol=scontrol(job, "FAILED"))
    out = CliRunner().invoke(main, ["status", "--runs-dir", str(tmp_path), run.name]).output
    assert "unknown" in out and "batch host" not in out, out
    fake.down = ["stnode1"]
    out = CliRunner().invoke(main, ["status", "--runs-dir", str(tmp_path), run.name]).output
    assert (f"warning    its batch host stnode1 is down, and Slurm ended the job FAILED (--no-kill: a job with "
            f"spares) with nothing of it left running: `slurmtrain resubmit --watch --detach {run.name}` requeues "
            f"it (and keeps watching), or `scontrol requeue {job}`") in out, out


def test_the_watch_continues_a_run_that_reached_its_requeue_limit(tmp_path, fake_slurm, monkeypatch):
    """`submit --max-requeues 0` then `resubmit --watch`: the requeues left to the watch. A
    preemption ends the job at its requeue limit, which the watch resubmits."""
    run, job = unended_run(tmp_path)
    for name, fields in (("checkpoint_saved", {"step": 9}), ("stopped", {"step": 9}),
                         ("preempted", {"job_id": job, "restart": 0, "exit_code": 1}),
                         ("requeue_limit", {"job_id": job, "restart": 0, "max_requeues": 0})):
        events.append(run.path, name, **fields)
    fake_slurm(scontrol=scontrol(job, "FAILED").replace("ExitCode=0:0", "ExitCode=3:0"))
    monkeypatch.setattr(resubmit, "job_end", lambda _run: resubmit.JobEnd(job, "FAILED", 3, False))
    resubmitted, said = watch_until_resubmitted(run, monkeypatch)
    assert resubmitted and any(line.startswith(f"job {job} ended: requeue limit") for line in said), said


def test_status_gives_the_time_of_every_start_beside_the_latest_ones(tmp_path, fake_slurm):
    from slurmtrain import events
    from slurmtrain.eventlog import time_in_starts

    run, job = recorded_run(tmp_path, "preempted_then_completed")
    evs = events.read(run.path)
    starts, total = time_in_starts(evs)
    started = [e["time"] for e in evs if e["event"] == "started"]
    ends = [max(e["time"] for e in evs if started[0] <= e["time"] < started[1]), evs[-1]["time"]]
    assert starts == 2 and total == pytest.approx((ends[0] - started[0]) + (ends[1] - started[1]))
    assert time_in_starts(evs, now=started[1] + 100) == (2, pytest.approx(ends[0] - started[0] + 100))
    fake_slurm(scontrol=scontrol(job, "COMPLETED"))
    out = CliRunner().invoke(main, ["status", "--runs-dir", str(tmp_path), run.name]).output
    line = next(x for x in out.splitlines() if x.startswith("elapsed"))
    assert line.endswith(" in 2 starts") and "(this start); " in line, out
