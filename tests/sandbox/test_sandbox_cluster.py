"""The sandbox as a real Slurm cluster: jobs across nodes, partitions, preemption,
idempotent up, clean down, accounting. Runs against the shared sandbox (see
tests/conftest.py); each test is bounded by explicit waits.

Order matters a little: the accounting tests restart the sandbox, so they come last.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurmtrain import sandbox as lib
from slurmtrain.sandbox import procs

pytestmark = pytest.mark.slurm


def sh(*cmd: str, check: bool = True, timeout: float = 60) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=os.environ)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr.strip()}")
    return proc.stdout


def wait_for(what: str, check, timeout: float = 60, interval: float = 0.5):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def job_field(job_id: str, key: str) -> str:
    out = sh("scontrol", "-o", "show", "job", job_id)
    for item in out.split():
        if item.startswith(key + "="):
            return item.split("=", 1)[1]
    return ""


def wait_state(job_id: str, states: set[str], timeout: float = 60) -> str:
    return wait_for(f"job {job_id} to reach {states}",
                    lambda: job_field(job_id, "JobState") in states and job_field(job_id, "JobState"),
                    timeout)


def sbatch(script: str, *args: str, tmp: Path) -> str:
    path = tmp / f"job{time.monotonic_ns()}.sh"
    path.write_text("#!/bin/bash\n" + script)
    return sh("sbatch", "--parsable", *args, str(path)).strip().split(";")[0]


def test_up_twice_changes_nothing(sandbox):
    before = lib.status()
    conf_mtime = before.slurm_conf.stat().st_mtime_ns
    s = before.settings
    again = lib.up(nodes=s.nodes, cpus_per_node=s.cpus_per_node, accounting=s.accounting,
                   progress=lambda m: None)
    assert again.pids == before.pids
    assert before.slurm_conf.stat().st_mtime_ns == conf_mtime


def test_up_with_other_settings_says_to_run_down_first(sandbox):
    s = lib.status().settings
    with pytest.raises(lib.SandboxError.__mro__[1], match="sandbox down` first"):
        lib.up(nodes=s.nodes + 1, cpus_per_node=s.cpus_per_node, accounting=s.accounting,
               progress=lambda m: None)


def test_partitions_debug_low_high(sandbox):
    parts = sh("sinfo", "-h", "-o", "%P").split()
    assert parts == ["debug*", "low", "high"]
    states = sh("sinfo", "-h", "-N", "-p", "debug", "-o", "%N %t").split("\n")
    assert {ln.split()[0] for ln in states if ln} == set(sandbox.nodes)


def test_two_node_job_runs_on_both_nodes_and_they_talk_tcp(sandbox, tmp_path):
    n1, n2 = sandbox.nodes[:2]
    out = tmp_path / "out.txt"
    # Rank 1 listens on its node's name; rank 0 connects to it by name.
    talk = (
        "import os, socket, time\n"
        "me, peer = os.environ['SLURMD_NODENAME'], os.environ['PEER']\n"
        "if os.environ['SLURM_PROCID'] == '1':\n"
        "    s = socket.create_server((me, 29511)); c, _ = s.accept(); print('got', c.recv(64).decode())\n"
        "else:\n"
        "    for _ in range(100):\n"
        "        try: c = socket.create_connection((peer, 29511)); break\n"
        "        except OSError: time.sleep(0.1)\n"
        "    c.sendall(('hello from ' + me).encode())\n"
    )
    (tmp_path / "talk.py").write_text(talk)
    job = sbatch(
        f'scontrol show hostnames "$SLURM_JOB_NODELIST" | sed "s/^/host /"\n'
        f"srun --ntasks-per-node=1 bash -c 'echo task $SLURMD_NODENAME'\n"
        f"srun -w {n2} -N1 -n1 bash -c 'echo only $SLURMD_NODENAME'\n"
        f"PEER={n2} srun -N2 --ntasks-per-node=1 python3 {tmp_path}/talk.py\n",
        "-N2", "-o", str(out), "-p", "debug", tmp=tmp_path)
    state = wait_state(job, {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}, timeout=90)
    text = out.read_text()
    assert state == "COMPLETED", text
    lines = text.splitlines()
    assert sorted(ln for ln in lines if ln.startswith("host ")) == [f"host {n1}", f"host {n2}"]
    assert sorted(ln for ln in lines if ln.startswith("task ")) == [f"task {n1}", f"task {n2}"]
    assert f"only {n2}" in lines
    assert f"got hello from {n1}" in lines


def test_high_preempts_low_which_is_requeued_and_runs_again(sandbox, tmp_path):
    nodes = str(len(sandbox.nodes))
    out = tmp_path / "low.txt"
    # 60 s of grace is right for checkpointing but long for a test: shorten it for now.
    sh("scontrol", "update", "PartitionName=low", "GraceTime=3")
    low = None
    try:
        # The tasks get SIGTERM when preemption starts; the batch script must outlive the
        # grace time, because a job that ends by itself during it is not requeued.
        low = sbatch(
            'echo "start ${SLURM_RESTART_COUNT:-0}" >> ' + str(out) + "\n"
            "srun bash -c 'trap \"echo TERM on $SLURMD_NODENAME >> " + str(out) + "\" TERM; "
            "sleep 300 & wait'\n"
            "sleep 300\n",
            "-p", "low", "-N", nodes, "--exclusive", "-o", "/dev/null", tmp=tmp_path)
        wait_state(low, {"RUNNING"}, timeout=30)
        wait_for("the low job's tasks to start", lambda: out.exists())
        high = sbatch("sleep 2\n", "-p", "high", "-N", nodes, "--exclusive", "-o", "/dev/null",
                      tmp=tmp_path)
        wait_for("the low job to be requeued",
                 lambda: job_field(low, "Restarts") == "1"
                 and job_field(low, "JobState") in ("PENDING", "REQUEUED", "REQUEUE_HOLD"),
                 timeout=60)
        wait_state(high, {"RUNNING", "COMPLETED"}, timeout=30)
        # Slurm holds a requeued job back ~2 minutes (BeginTime); let it go now.
        sh("scontrol", "update", f"JobId={low}", "StartTime=now")
        wait_state(low, {"RUNNING"}, timeout=60)
        wait_for("the requeued job to start again", lambda: "start 1" in out.read_text(), timeout=20)
        text = out.read_text()
        assert "start 0" in text and "TERM on" in text, text
    finally:
        if low:
            sh("scancel", low, check=False)
        sh("scontrol", "update", "PartitionName=low", "GraceTime=60", check=False)


def test_down_leaves_no_daemon_then_up_again(sandbox):
    info = lib.status()
    s = info.settings
    pids = dict(info.pids)
    assert len(pids) >= 2 + len(info.nodes)
    lib.down(progress=lambda m: None)
    assert not lib.is_up() and lib.status() is None
    still = {name: pid for name, pid in pids.items() if procs.alive(pid)}
    assert still == {}
    strays = [p for p in procs.all_pids() if procs.alive(p) and procs.runs(p, "slurmstepd")
              and procs.uses_dir(p, info.state_dir)]
    assert strays == []
    started = time.monotonic()
    again = lib.up(nodes=s.nodes, cpus_per_node=s.cpus_per_node, accounting=s.accounting,
                   progress=lambda m: None)
    assert set(again.node_states) == set(info.nodes)
    assert time.monotonic() - started < 60
    wait_for("all nodes idle", lambda: set(sh("sinfo", "-h", "-N", "-o", "%t").split()) == {"idle"},
             timeout=30)


def test_accounting_sacct_shows_the_job(sandbox_accounting, tmp_path):
    assert sandbox_accounting.settings.accounting
    job = sbatch("srun hostname\n", "-N1", "-o", "/dev/null", tmp=tmp_path)
    wait_state(job, {"COMPLETED"}, timeout=60)

    def listed():
        out = sh("sacct", "-n", "-X", "-P", "-j", job, "-o", "JobID,Partition,State", check=False)
        return out.strip() == f"{job}|debug|COMPLETED" and out

    wait_for(f"sacct to show job {job} COMPLETED", listed, timeout=30)


def test_without_accounting_sacct_fails(sandbox_no_accounting):
    proc = subprocess.run(["sacct", "-j", "1"], capture_output=True, text=True, env=os.environ)
    assert proc.returncode != 0
    assert "accounting storage is disabled" in proc.stdout + proc.stderr


def test_a_fault_through_the_network_needs_networked_nodes(sandbox):
    proc = subprocess.run([sys.executable, "-m", "slurmtrain", "sandbox", "fault", "stnode1", "link-down"],
                          capture_output=True, text=True, timeout=60, env=os.environ)
    assert proc.returncode == 2 and "need networked nodes: `slurmtrain sandbox down`" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    unknown = subprocess.run([sys.executable, "-m", "slurmtrain", "sandbox", "fault", "stnode9", "link-down"],
                             capture_output=True, text=True, timeout=60, env=os.environ)
    assert unknown.returncode == 2 and "no node 'stnode9'" in unknown.stderr, unknown.stderr  # named first
