"""tests/train/spawn_ranks.py, the trainer tests' stand-in for torchrun's agent, alone and
through rank_server.py (ranks forked from a process that has imported the trainer): the
environment each rank gets, what happens when one fails, exit statuses and signals."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trainer_util import env, rank_exit_codes, rank_server

SPAWN = str(Path(__file__).with_name("spawn_ranks.py"))
# Through the server: it imports torch and the trainer first, a few seconds (slow lane).
MODES = ("exec", pytest.param("server", marks=pytest.mark.slow))


def argv(mode: str, n: int, code: str) -> list[str]:
    server = ["--server", rank_server()] if mode == "server" else []
    return [sys.executable, SPAWN, *server, str(n), sys.executable, "-c", code]


def spawn(mode: str, n: int, code: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv(mode, n, code), capture_output=True, text=True, timeout=120, env=env())


@pytest.mark.parametrize("mode", MODES)
def test_each_rank_gets_torchruns_environment(mode, tmp_path):
    # One write per rank: the ranks share stdout, and print's pieces could interleave.
    proc = subprocess.run(argv(mode, 3, "import os; os.write(1, (' '.join([os.environ[k] for k in ('RANK', "
                                        "'LOCAL_RANK', 'WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT')] + "
                                        "[os.getcwd(), os.environ['MARK']]) + '\\n').encode())"),
                          capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env(MARK="mine"))
    assert proc.returncode == 0, proc.stderr
    lines = sorted(proc.stdout.splitlines())
    ports = {line.split()[4] for line in lines}
    assert len(ports) == 1 and ports.pop().isdigit()
    assert [line.split()[:4] for line in lines] == [[str(r), str(r), "3", "127.0.0.1"] for r in range(3)]
    assert {tuple(line.split()[5:]) for line in lines} == {(str(tmp_path), "mine")}  # its cwd and env


@pytest.mark.parametrize("mode", MODES)
def test_one_rank_failing_stops_the_others_and_is_reported(mode):
    start = time.monotonic()
    # Rank 0 waits for a signal; only spawn_ranks' SIGTERM ends it.
    proc = spawn(mode, 2, "import os, signal, sys\nif os.environ['RANK'] == '1': sys.exit(3)\nsignal.pause()")
    assert proc.returncode == 1, proc.stderr
    assert rank_exit_codes(proc) == {3}, proc.stderr  # rank 0, ended by SIGTERM, is not a failure
    assert "rank 1 failed" in proc.stderr
    assert time.monotonic() - start < 60


@pytest.mark.slow
def test_one_rank_through_the_server_exits_as_python_would():
    assert spawn("server", 1, "import sys; sys.exit(75)").returncode == 75
    assert spawn("server", 1, "import os, signal; os.kill(os.getpid(), signal.SIGTERM)").returncode == -15
    raised = spawn("server", 1, "raise ValueError('from the rank')")
    assert raised.returncode == 1 and "ValueError: from the rank" in raised.stderr, raised.stderr
    printed = spawn("server", 1, "import sys; print('out'); print('err', file=sys.stderr)")
    assert (printed.stdout, printed.stderr) == ("out\n", "err\n")


@pytest.mark.slow
def test_a_signal_to_spawn_ranks_reaches_every_forked_rank(tmp_path):
    """Each rank records the signal and exits 0. (Exiting non-zero raced: the first rank
    out had the supervisor SIGTERM the other before Python ran that one's handler.)"""
    code = ("import os, signal, sys\n"
            "signal.signal(signal.SIGUSR1, lambda *_: (open('got-' + os.environ['RANK'], 'w').close(), sys.exit(0)))\n"
            "open(os.environ['RANK'], 'w').close()\n"
            "signal.pause()")
    proc = subprocess.Popen(argv("server", 2, code), cwd=tmp_path, env=env(), stderr=subprocess.PIPE, text=True)
    _wait(lambda: {p.name for p in tmp_path.iterdir()} == {"0", "1"}, proc)
    proc.send_signal(signal.SIGUSR1)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert {p.name for p in tmp_path.iterdir()} == {"0", "1", "got-0", "got-1"}


@pytest.mark.slow
def test_the_run_dies_with_its_client(tmp_path):
    """A test that kills spawn_ranks after a stall (SIGKILL: nothing to forward) ends the
    ranks the server forked for it, not leaves them training."""
    code = "import os, signal\nopen(os.environ['RANK'], 'w').write(str(os.getpid()))\nsignal.pause()"
    proc = subprocess.Popen(argv("server", 2, code), cwd=tmp_path, env=env())
    _wait(lambda: all((tmp_path / r).is_file() and (tmp_path / r).read_text() for r in "01"), proc)
    pids = [int((tmp_path / r).read_text()) for r in "01"]
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 30
    while any(_alive(p) for p in pids):
        assert time.monotonic() < deadline, f"ranks {pids} outlived their client"
        time.sleep(0.1)


def test_usage_is_exit_2():
    proc = subprocess.run([sys.executable, SPAWN, "two", "true"], capture_output=True, text=True)
    assert proc.returncode == 2 and "usage" in proc.stderr
    proc = subprocess.run([sys.executable, SPAWN, "--server", "/nonexistent", "2", "true"], capture_output=True,
                          text=True)
    assert proc.returncode == 2 and "PYTHON -m MODULE" in proc.stderr


def _wait(pred, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert proc.poll() is None and time.monotonic() < deadline, f"spawn_ranks exited {proc.returncode}"
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ")[1].split()[0] != "Z"  # a zombie has ended
    except FileNotFoundError:
        return False
