"""doctor and the bad-node ledger on the sandbox (two nodes).

Two doctor runs go into the queue at once and are shared by the tests: a healthy one,
and one where a setup line fails on stnode2 only. The second one's start-up watchdog
names stnode2 (the ledger records it) and its doctor fails it; a 1-node job submitted
next to it then carries --exclude=stnode2 and runs on stnode1; `nodes forget` clears.
Ports: 29860-29879 (this area's range).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import waiting
from slurmtrain import events
from slurmtrain import ledger

pytestmark = pytest.mark.slurm

# No `exit`: a plain command that fails on stnode2 only (a missing venv, a failing module load).
BAD_LINE = 'test "$SLURMD_NODENAME" != stnode2'
BAD_SETUP = f"launch.setup=['{BAD_LINE}']"
# Fails on whichever node the job's first start lands on: the gate must move it.
FIRST_START_FAILS = """launch.setup=['[ "${SLURM_RESTART_COUNT:-0}" -gt 0 ] || { echo "bad on the first start" >&2; exit 3; }']"""


def _doctor(cwd: Path, runs: str, port: int, *extra: str) -> subprocess.Popen:
    argv = [sys.executable, "-m", "slurmtrain", "doctor", "--runs-dir", runs, "--seconds", "1",
            "--set", f"launch.rdzv_port={port}", "--set", "launch.rdzv_port_spread=0", *extra]
    return subprocess.Popen(argv, cwd=cwd, env=dict(os.environ), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _queue() -> str:
    """The sandbox's queue: a job of ours waiting behind other sessions' jobs is not
    stalled while that queue moves."""
    return subprocess.run(["squeue", "-h", "-o", "%i %t"], capture_output=True, text=True, timeout=60).stdout


def _finish(proc: subprocess.Popen, what: str, watch: Path) -> subprocess.CompletedProcess:
    progress = waiting.Progress(lambda: (waiting.files_fingerprint(watch), _queue()))
    while True:
        try:
            out, err = proc.communicate(timeout=5)
            return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        except subprocess.TimeoutExpired:
            pass
        try:
            progress.check(what)
        except AssertionError:
            proc.kill()
            raise


@pytest.fixture(scope="module")
def runs(_sandbox_session, tmp_path_factory):
    cwd = tmp_path_factory.mktemp("doctor")
    (cwd / "hello.py").write_text("import os\nprint('ran on', os.environ['SLURMD_NODENAME'])\n")
    # The gate's job goes into the queue first: it waits for its requeue meanwhile.
    _submit(cwd, "gate", "gated", 29863, "--set", "resilience.preflight=true", "--set", FIRST_START_FAILS)
    healthy = _doctor(cwd, "healthy", 29860)
    bad = _doctor(cwd, "bad", 29861, "--set", BAD_SETUP)
    # Inside an allocation (SLURM_JOB_ID set): doctor runs the script there, no sbatch.
    alloc = subprocess.Popen(["salloc", "-N", "2", "--cpus-per-task=2", sys.executable, "-m", "slurmtrain", "doctor",
                              "--runs-dir", "alloc", "--seconds", "1", "--checks", "versions,rundir,allreduce",
                              "--set", "launch.rdzv_port=29864", "--set", "launch.rdzv_port_spread=0"],
                             cwd=cwd, env=dict(os.environ), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    setup_job = _submit(cwd, "setupjob", "badsetup", 29865, "-N", "2", "--set", BAD_SETUP)
    out = {"cwd": cwd, "setup_job": setup_job, "bad": _finish(bad, "doctor with a bad stnode2", cwd / "bad"),
           "healthy": _finish(healthy, "doctor on the healthy sandbox", cwd / "healthy"),
           "alloc": _finish(alloc, "doctor inside an salloc allocation", cwd / "alloc")}
    return out


def _submit(cwd: Path, runs: str, name: str, port: int, *extra: str) -> Path:
    """A 1-node job running hello.py; its run directory."""
    sub = subprocess.run([sys.executable, "-m", "slurmtrain", "submit", "--runs-dir", runs, "-N", "1",
                          "--name", name, "--set", "launch.procs_per_node=1", "--set", f"launch.rdzv_port={port}",
                          "--set", "launch.rdzv_port_spread=0", *extra, "--", "python3", "hello.py"],
                         cwd=cwd, capture_output=True, text=True, timeout=120)
    assert sub.returncode == 0, sub.stdout + sub.stderr
    [run_dir] = (cwd / runs).glob(f"{name}-*")
    return run_dir


def _finished(run_dir: Path, what: str) -> list[dict]:
    """The run's events once it has ended; a failed requeue ends the wait too (the job is
    then held, and would only stall it), and a stall shows the events, the batch log's end
    and Slurm's view of the job."""
    def ended():
        evs = events.read(run_dir)
        ends = ("finished", "failed", "requeue_failed", "watchdog_timeout")
        return evs if any(e["event"] in ends for e in evs) else None

    def details() -> str:
        logs = sorted((run_dir / "logs").glob("job-*.out"))
        tail = "\n".join(logs[-1].read_text(errors="replace").splitlines()[-20:]) if logs else "(no batch log)"
        evs = "\n".join(json.dumps(e) for e in events.read(run_dir))
        job = next((e["job_id"] for e in events.read(run_dir) if e.get("job_id")), "")
        show = subprocess.run(["scontrol", "-o", "show", "job", job], capture_output=True, text=True,
                              timeout=60).stdout if job else ""
        return f"events:\n{evs}\nbatch log tail:\n{tail}\nscontrol show job {job}:\n{show}"
    return waiting.wait_for(what, ended, lambda: (waiting.files_fingerprint(run_dir), _queue()), poll=2,
                            details=details)


def _doctor_json(cwd: Path, runs: str) -> dict:
    [path] = (cwd / runs).glob("doctor-*/doctor.json")
    return json.loads(path.read_text())


def test_healthy_sandbox_passes_with_a_real_allreduce_figure(runs):
    proc, cwd = runs["healthy"], runs["cwd"]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "doctor: every check passed" in proc.stdout
    data = _doctor_json(cwd, "healthy")
    assert data["passed"] and not data["failing"]
    nodes = {r["node"] for r in data["rows"]} - {"(slurm)"}
    assert nodes == {"stnode1", "stnode2"}
    checks = {r["check"] for r in data["rows"]}
    assert checks >= {"setup", "versions", "rundir", "gpus", "matmul", "allreduce", "port", "clock", "slurm"}
    [run_dir] = (cwd / "healthy").glob("doctor-*")
    for node in ("stnode1", "stnode2"):
        res = json.loads((run_dir / "doctor" / f"{node}.json").read_text())["results"]["allreduce"]
        assert res["data"]["backend"] == "gloo" and res["data"]["world"] == 2
        assert res["data"]["busbw_gbps"] > 0 and res["data"]["iterations"] >= 1
    for line in ("stnode1  allreduce", "stnode2  matmul", "(slurm)  slurm"):
        assert line in proc.stdout  # the table
    assert ledger.read(cwd / "healthy") == []


def test_a_node_whose_setup_fails_is_named_and_exits_nonzero(runs):
    proc, cwd = runs["bad"], runs["cwd"]
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "doctor: failing: stnode2: setup" in proc.stdout
    assert _doctor_json(cwd, "bad")["failing"] == [{"node": "stnode2", "check": "setup"}]


def test_doctor_names_the_failed_setup_line_and_its_status(runs):
    proc = runs["bad"]
    assert f"setup line `{BAD_LINE}` exited with status 1" in proc.stdout, proc.stdout


def test_a_failed_setup_line_is_named_in_status_and_logs(runs):
    """A submitted 2-node run whose setup line fails on stnode2 only: the job ends at
    start-up (exit 4) and status, its JSON and logs name the node, the line and its status."""
    cwd, run_dir = runs["cwd"], runs["setup_job"]
    evs = _finished(run_dir, "the run whose setup fails on stnode2")
    [failed] = [e for e in evs if e["event"] == "setup_failed"]
    assert (failed["node"], failed["line"], failed["exit_code"]) == ("stnode2", BAD_LINE, 1)

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "slurmtrain", *args, "--runs-dir", "setupjob", run_dir.name],
                              cwd=cwd, capture_output=True, text=True, timeout=120)
    status = cli("status")
    assert f"a setup line failed on stnode2 (exit status 1): {BAD_LINE}" in status.stdout, status.stdout
    detail = json.loads(cli("status", "--json").stdout)
    assert [(e["node"], e["line"]) for e in detail["events"] if e["event"] == "setup_failed"] == [("stnode2", BAD_LINE)]
    assert BAD_LINE in detail["outcome_detail"], detail
    logs = cli("logs")
    assert f"setup line failed on stnode2 with exit status 1: {BAD_LINE}" in logs.stdout, logs.stdout
    batch = next((run_dir / "logs").glob("job-*.out")).read_text()
    assert f"stnode2: setup line `{BAD_LINE}` exited with status 1" in batch, batch
    assert "failed at start-up: setup failed on stnode2, exit status 4" in batch, batch
    assert [(e.node, e.source) for e in ledger.read(cwd / "setupjob")] == [("stnode2", "setup")]


def test_ledger_records_the_watchdogs_node_next_submit_excludes_it_and_forget_clears(runs):
    cwd = runs["cwd"]
    sources = {e.source for e in ledger.read(cwd / "bad") if e.node == "stnode2"}
    assert sources == {"setup", "doctor"}, ledger.read(cwd / "bad")
    assert all(e.node == "stnode2" for e in ledger.read(cwd / "bad"))
    run_dir = _submit(cwd, "bad", "after-ledger", 29862)
    assert "#SBATCH --exclude=stnode2\n" in (run_dir / "job.sbatch").read_text()
    evs = _finished(run_dir, "the 1-node job after the ledger entry to finish")
    assert [e["nodes"] for e in evs if e["event"] == "started"] == ["stnode1"]
    assert [e.get("exit_code") for e in evs if e["event"] == "finished"] == [0]

    forget = subprocess.run([sys.executable, "-m", "slurmtrain", "nodes", "--runs-dir", "bad", "forget", "stnode2"],
                            cwd=cwd, capture_output=True, text=True, timeout=60)
    assert forget.returncode == 0 and "forgot 2 entries" in forget.stdout, forget.stdout + forget.stderr
    listed = subprocess.run([sys.executable, "-m", "slurmtrain", "nodes", "--runs-dir", "bad"], cwd=cwd,
                            capture_output=True, text=True, timeout=60)
    assert "no bad nodes recorded" in listed.stdout


def test_gate_rejects_the_first_node_and_the_run_goes_on_on_the_other(runs):
    cwd = runs["cwd"]
    [run_dir] = (cwd / "gate").glob("gated-*")
    evs = _finished(run_dir, "the gated job to requeue itself and finish")
    [rejected] = [e["nodes"] for e in evs if e["event"] == "preflight_failed"]
    starts = [(e["restart"], e["nodes"]) for e in evs if e["event"] == "started"]
    assert [r for r, _ in starts] == [0, 1] and starts[0][1] == rejected, evs
    assert starts[1][1] != rejected and starts[1][1] in ("stnode1", "stnode2")
    assert [e["nodes"] for e in evs if e["event"] == "preflight_passed"] == [starts[1][1]]
    assert [e.get("exit_code") for e in evs if e["event"] == "finished"] == [0]
    assert [(e.node, e.source) for e in ledger.read(cwd / "gate")] == [(rejected, "gate")]


def test_doctor_inside_an_allocation_runs_there_without_sbatch(runs):
    proc, cwd = runs["alloc"], runs["cwd"]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "inside allocation" in proc.stderr and "submitted doctor job" not in proc.stderr
    data = _doctor_json(cwd, "alloc")
    assert data["passed"] and {(r["node"], r["check"]) for r in data["rows"]} >= {
        ("stnode1", "allreduce"), ("stnode2", "allreduce"), ("stnode2", "rundir")}
