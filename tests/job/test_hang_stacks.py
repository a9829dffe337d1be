"""A hung rank's stacks where py-spy may not trace it (Yama's ptrace_scope=1, Ubuntu's
default: the ranks are the step daemon's children, not the supervisor's): the supervisor
asks the rank for its own dump (the stop contract's faulthandler on SIGURG). Real processes
and signals; py-spy is a stand-in that answers as it does under Yama."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from slurmtrain import heartbeat
from slurmtrain.job import hangs
from slurmtrain.job.slurm import Slurm

RANK = '''import sys, threading
from slurmtrain import heartbeat, stop
if sys.argv[1] == "contract":
    stop.install()
heartbeat.beat(7)

def blocked_in_a_collective():
    print("ready", flush=True)
    threading.Event().wait()  # the main thread blocked in C, as in an all-reduce

blocked_in_a_collective()
'''
YAMA = "Error: Failed to suspend process: Operation not permitted (os error 1): ptrace_scope is 1\n"


@pytest.fixture
def no_ptrace(tmp_path, monkeypatch):
    """A py-spy that fails as it does under Yama's ptrace_scope=1."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "py-spy").write_text(f"#!/bin/sh\nprintf '%s' '{YAMA.strip()}' >&2\nexit 1\n")
    (bin_dir / "py-spy").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SLURMD_NODENAME", "stnode1")  # the ranks' node: no srun
    return bin_dir


def start_rank(tmp_path: Path, mode: str) -> subprocess.Popen:
    hb = tmp_path / "hb"
    hb.mkdir(exist_ok=True)
    env = {**os.environ, heartbeat.ENV: str(hb), "RANK": "1", "SLURMD_NODENAME": "stnode1"}
    proc = subprocess.Popen([sys.executable, "-c", RANK, mode], env=env, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def stacks_of(tmp_path: Path, proc: subprocess.Popen) -> str:
    [beat] = heartbeat.read(tmp_path / "hb")
    assert beat.pid == proc.pid
    out = hangs.dump_stacks(Slurm("1"), [beat], tmp_path / "stacks", tmp_path / "hb")
    return (out / "rank1-stnode1.txt").read_text()


def test_a_rank_py_spy_may_not_trace_dumps_its_own_stack(tmp_path, no_ptrace):
    proc = start_rank(tmp_path, "contract")
    try:
        text = stacks_of(tmp_path, proc)
        alive = proc.poll() is None  # it answered and went on waiting: the signal did not end it
    finally:
        proc.kill()
    assert text.startswith("# the rank's own dump (faulthandler), since py-spy: Error: Failed to suspend"), text
    assert "Current thread" in text and "blocked_in_a_collective" in text, text
    assert alive


def test_a_rank_without_the_contract_is_left_alone_and_the_file_says_why(tmp_path, no_ptrace):
    proc = start_rank(tmp_path, "plain")
    try:
        text = stacks_of(tmp_path, proc)
        assert proc.poll() is None  # not signalled: nothing of it was touched
    finally:
        proc.kill()
    assert text == f"no stack: py-spy: {YAMA.strip()}; the program does not install slurmtrain.stop's own dump\n"


def test_a_stopped_rank_cannot_answer_and_the_file_says_so(tmp_path, no_ptrace):
    proc = start_rank(tmp_path, "contract")
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        text = stacks_of(tmp_path, proc)
    finally:
        proc.kill()
    assert "did not answer its stack signal (a stopped process?)" in text, text


def test_the_stack_signal_does_nothing_to_a_program_that_never_asked_for_it():
    assert signal.getsignal(heartbeat.STACK_SIGNAL) == signal.SIG_DFL  # this test process: default
    os.kill(os.getpid(), heartbeat.STACK_SIGNAL)  # SIGURG's default action: ignore; we are still here


def test_a_node_srun_cannot_reach_is_asked_once_and_each_of_its_ranks_says_why(tmp_path, monkeypatch):
    """A node whose link is down: srun reaches nothing there, so its other ranks are not
    asked again (8 ranks a node: 80 s of timeouts), and no rank signal is sent its way."""
    from slurmtrain.job.slurm import Answer
    monkeypatch.setattr(hangs.shutil, "which", lambda name: "/usr/bin/py-spy")
    monkeypatch.setenv("SLURMD_NODENAME", "stnode1")
    asked = []

    def run(argv, timeout):
        asked.append(argv)
        if "-w" in argv and argv[argv.index("-w") + 1] == "stnode2":
            return Answer(124, "", f"srun timed out after {timeout:g} s")
        return Answer(0, "Thread 1 (idle): MainThread\n    all_reduce (c10d.py:1)\n")

    beats = [heartbeat.Beat(rank=r, node=n, pid=100 + r, step=7, time=0.0)
             for r, n in ((0, "stnode1"), (1, "stnode2"), (2, "stnode2"), (3, "stnode1"))]
    out = hangs.dump_stacks(Slurm("1", run=run), beats, tmp_path / "stacks")
    assert sum("stnode2" in argv for argv in asked) == 1
    assert "all_reduce" in (out / "rank0-stnode1.txt").read_text()
    assert (out / "rank1-stnode2.txt").read_text() == (
        "no stack: stnode2 did not answer (srun timed out after 10 s): its link or its slurmd is down?\n")
    assert (out / "rank2-stnode2.txt").read_text() == "no stack: stnode2 did not answer (see the node's other ranks)\n"


def test_the_rank_outside_the_collective_its_peers_wait_in_is_told_apart(tmp_path):
    """A Hugging Face Trainer's ranks (a helper's hang, trimmed): rank 3 stopped in its own
    callback, the others in all_gather; no process state (the rank's own dump, say)."""
    beats = [heartbeat.Beat(rank=r, node=n, pid=100 + r, step=13, time=0.0)
             for r, n in ((0, "stnode1"), (1, "stnode1"), (2, "stnode2"), (3, "stnode2"))]
    waiting = ('Thread 1 (idle): "MainThread"\n    all_gather (torch/distributed/distributed_c10d.py:4287)\n'
               '    distributed_concat (transformers/trainer_pt_utils.py:207)\nThread 2 (idle): "tqdm_monitor"\n'
               '    Condition.wait (threading.py:331)\n')
    own = 'Thread 4 (idle): "MainThread"\n    Probe.on_step_end (train.py:64)\n    Trainer.train (trainer.py:1)\n'
    for b in beats:
        (tmp_path / f"rank{b.rank}-{b.node}.txt").write_text(own if b.rank == 3 else waiting)
    odd, why = hangs.odd_ranks(beats, tmp_path)
    assert ([b.rank for b in odd], why) == ([3], "not in a collective, where the others wait in one")
    for b in beats:  # every rank waits: a collective that never returns, nobody told apart
        (tmp_path / f"rank{b.rank}-{b.node}.txt").write_text(waiting)
    assert hangs.odd_ranks(beats, tmp_path) == ([], "")
    (tmp_path / "rank3-stnode2.txt").write_text("no stack: stnode2 did not answer\n")
    assert hangs.odd_ranks(beats, tmp_path) == ([], "")  # no stack: not judged


def test_without_py_spy_the_rank_that_does_not_dump_its_own_stack_is_told_apart(tmp_path):
    """A user's venv (--system-site-packages) had no py-spy on PATH: every rank dumped its
    own stack on the signal, in all_reduce, but the SIGSTOPped rank 2 could not; the hang
    named all four ranks as the last to report."""
    beats = [heartbeat.Beat(rank=r, node=n, pid=100 + r, step=69, time=0.0)
             for r, n in ((0, "stnode1"), (1, "stnode1"), (2, "stnode2"), (3, "stnode2"))]
    own = ("# the rank's own dump (faulthandler), since py-spy is not installed where the supervisor runs\n"
           "Current thread 0x00007f03bfdf2b80 (most recent call first):\n"
           '  File "/x/torch/distributed/distributed_c10d.py", line 3252 in all_reduce\n'
           '  File "/home/u/train_acc.py", line 37 in <module>\n')
    for b in beats:
        (tmp_path / f"rank{b.rank}-{b.node}.txt").write_text(
            own if b.rank != 2 else "no stack: py-spy is not installed where the supervisor runs (pip install "
                                    "py-spy); the rank did not answer its stack signal (a stopped process?)\n")
    odd, why = hangs.odd_ranks(beats, tmp_path)
    assert [b.rank for b in odd] == [2] and why.startswith("did not answer its stack signal"), (odd, why)


def test_py_spy_is_found_beside_the_base_interpreter_of_a_venv(tmp_path, monkeypatch):
    base = tmp_path / "base"
    (base / "bin").mkdir(parents=True)
    (base / "bin" / "py-spy").write_text("#!/bin/sh\n")
    (base / "bin" / "py-spy").chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(hangs.sys, "executable", str(tmp_path / "venv" / "bin" / "python"))
    monkeypatch.setattr(hangs.sys, "base_prefix", str(base))
    assert hangs.find_py_spy() == str(base / "bin" / "py-spy")
    monkeypatch.setattr(hangs.sys, "base_prefix", str(tmp_path / "none"))
    assert hangs.find_py_spy() is None
