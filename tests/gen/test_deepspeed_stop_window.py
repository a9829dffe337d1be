"""DeepSpeed's launcher kills its workers 30 s after a SIGTERM (psutil.wait_procs with
timeout=30 in deepspeed.launcher.launch.terminate_process_tree): the job script's agent
stretches the wait to resilience.stop_timeout, so a checkpoint at a preemption is not cut
short there. Checked with the rendered agent itself around a module that waits."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from slurmtrain.cli import main

pytest.importorskip("psutil")

PROBE = """\
import subprocess, time, psutil
child = subprocess.Popen(["sleep", "60"])
began = time.monotonic()
psutil.wait_procs([psutil.Process(child.pid)], timeout=0.2)  # DeepSpeed's call, its 30 made short
print(f"waited {time.monotonic() - began:.1f}")
child.kill()
"""


def agent(launcher: str, stop_timeout: int) -> str:
    result = CliRunner().invoke(main, ["gen", "--profile", "local", "--launcher", launcher, "--set",
                                       f"resilience.stop_timeout={stop_timeout}", "--", "python3", "x.py"])
    assert result.exit_code == 0, result.output
    assert "kills its workers after" not in result.stderr  # the launcher honours stop_timeout now
    return re.search(r"SLURMTRAIN_AGENT='(.*?)'\n", result.stdout, re.S)[1]


@pytest.mark.slow  # real processes waiting out a stop window: about 3 s
def test_the_deepspeed_agent_waits_the_stop_window_for_its_workers(tmp_path):
    (tmp_path / "probe.py").write_text(PROBE)
    code = agent("deepspeed", 3)
    proc = subprocess.run([sys.executable, "-c", code, "probe"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert float(proc.stdout.split()[-1]) >= 2.5, proc.stdout  # 0.2 as DeepSpeed asked, 3 as the profile says
    assert "psutil" not in agent("torchrun", 3)  # torchrun's own window: TORCH_ELASTIC_SHUTDOWN_TIMEOUT


def test_no_agent_preamble_ends_the_shell_word_it_is_written_in():
    from slurmtrain import launchers
    assert all("'" not in launchers.get(name).agent_preamble for name in launchers.names())


@pytest.mark.slow  # torchrun and two workers, three times: about 6 s each
@pytest.mark.parametrize("codes, status, traceback", [
    ("75 75", 75, False),  # every worker stopped as the stop contract says: one line, its status
    ("75 sleep", 75, False),  # ... one still exiting when the first had left: torchrun's SIGTERM (-15)
    ("3 75", 1, True),     # a failure among them is torchrun's, as it was: traceback, Root Cause, exit 1
    ("usr2 usr2", 140, False),  # killed by the stop signal, no handler yet: 128 + 12, as srun would say it
])
def test_the_torchrun_agent_passes_a_stop_on_in_one_line(tmp_path, codes, status, traceback):
    from slurmtrain.launchers.torchrun import ROOT_CAUSE
    workers = (f"codes=({codes}); [ ${{codes[$LOCAL_RANK]}} = sleep ] && exec sleep 30; "
               "[ ${codes[$LOCAL_RANK]} = usr2 ] && kill -USR2 $BASHPID; exit ${codes[$LOCAL_RANK]}")
    proc = subprocess.run([sys.executable, "-c", agent("torchrun", 30), "torch.distributed.run", "--nnodes=1",
                           "--nproc-per-node=2", "--no-python", "bash", "-c", workers],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == status, proc.stderr
    assert ("Traceback" in proc.stderr) is traceback, proc.stderr
    if status == 140:
        assert proc.stderr.splitlines()[-1].endswith("the workers were killed by SIGUSR2, the stop signal: no "
                                                     "handler for it yet"), proc.stderr
        return
    assert ROOT_CAUSE.search(proc.stderr)[1] in ("75", "3")  # status still reads the program's own code
    if not traceback:
        assert "the workers stopped after a checkpoint (exitcode: 75)" in proc.stderr.splitlines()[-1]
