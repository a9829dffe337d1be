"""tests/train/spawn_ranks.py, the trainer tests' stand-in for torchrun's agent: the
environment each rank gets, and what happens when one fails."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from trainer_util import rank_exit_codes

SPAWN = str(Path(__file__).with_name("spawn_ranks.py"))


def spawn(n: int, code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, SPAWN, str(n), sys.executable, "-c", code],
                          capture_output=True, text=True, timeout=120)


def test_each_rank_gets_torchruns_environment():
    # One write per rank: the ranks share stdout, and print's pieces could interleave.
    proc = spawn(3, "import os; os.write(1, (' '.join(os.environ[k] for k in ('RANK', 'LOCAL_RANK', "
                    "'WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT')) + '\\n').encode())")
    assert proc.returncode == 0, proc.stderr
    lines = sorted(proc.stdout.splitlines())
    ports = {line.split()[-1] for line in lines}
    assert len(ports) == 1 and ports.pop().isdigit()
    assert [line.split()[:4] for line in lines] == [[str(r), str(r), "3", "127.0.0.1"] for r in range(3)]


def test_one_rank_failing_stops_the_others_and_is_reported():
    start = time.monotonic()
    # Rank 0 waits for a signal; only spawn_ranks' SIGTERM ends it.
    proc = spawn(2, "import os, signal, sys\nif os.environ['RANK'] == '1': sys.exit(3)\nsignal.pause()")
    assert proc.returncode == 1, proc.stderr
    assert rank_exit_codes(proc) == {3}, proc.stderr  # rank 0, ended by SIGTERM, is not a failure
    assert "rank 1 failed" in proc.stderr
    assert time.monotonic() - start < 60


def test_usage_is_exit_2():
    proc = subprocess.run([sys.executable, SPAWN, "two", "true"], capture_output=True, text=True)
    assert proc.returncode == 2 and "usage" in proc.stderr
