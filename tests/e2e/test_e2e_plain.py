"""`slurmtrain gen --plain`: the unsupervised script (the task and one srun) runs a real
2-node job on the sandbox, as a site without slurmtrain on its batch hosts would use it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import waiting
from e2e_util import PROGRAM, cli

pytestmark = pytest.mark.slurm


def run_script(script, cwd, what: str) -> str:
    """Submit ``script`` and wait until its job ends; its final JobState. Not `sbatch --wait`:
    it polls at growing intervals, up to 30 s after the job ended."""
    sub = subprocess.run(["sbatch", "--parsable", str(script)], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert sub.returncode == 0, sub.stderr
    job = sub.stdout.strip().split(";")[0]

    def state() -> str:
        out = subprocess.run(["scontrol", "-o", "show", "job", job], capture_output=True, text=True, timeout=30).stdout
        return next((w.split("=", 1)[1] for w in out.split() if w.startswith("JobState=")), "")

    # SIGNALING: a signal in flight (the stop signal here), shown in place of RUNNING
    return waiting.wait_for(what, lambda: (s := state()) not in ("", "PENDING", "RUNNING", "COMPLETING",
                                                                   "CONFIGURING", "SIGNALING") and s,
                            lambda: (state(), waiting.files_fingerprint(cwd / "runs")))


@pytest.mark.parametrize("launcher,port", [("torchrun", 29930), ("srun-loop", 29931), ("deepspeed", 29932)])
def test_the_plain_script_runs_the_program_on_every_node(tmp_path, launcher, port):
    gen = cli(tmp_path, "gen", "--plain", "--profile", "local", "--launcher", launcher, "--name", "plain",
              "--set", f"launch.rdzv_port={port}", "--set", "launch.rdzv_port_spread=0",
              "--", sys.executable, str(PROGRAM), "a b")
    assert gen.returncode == 0, gen.stderr
    assert "no supervisor" in gen.stdout.lower() and "slurmtrain.job" not in gen.stdout
    script = tmp_path / "plain.sbatch"
    script.write_text(gen.stdout)
    runs = tmp_path / "runs"
    assert run_script(script, tmp_path, f"the plain {launcher} script") == "COMPLETED"
    [run] = runs.iterdir()
    ranks = [json.loads(line) for line in (run / "ranks.jsonl").read_text().splitlines()]
    assert sorted(r["rank"] for r in ranks) == [0, 1, 2, 3]
    assert {r["node"] for r in ranks} == {"stnode1", "stnode2"}
    assert all(r["sum"] == 10 and r["args"] == ["a b"] for r in ranks)
    assert not (run / "events.jsonl").exists()  # it writes no events: the header says so


def test_a_failing_setup_line_ends_the_plain_job_with_its_status(tmp_path):
    gen = cli(tmp_path, "gen", "--plain", "--profile", "local", "--name", "plainfail",
              "--set", "launch.setup=['test \"$SLURMD_NODENAME\" != stnode2']", "--", "python3", "x.py")
    assert gen.returncode == 0, gen.stderr
    script = tmp_path / "plainfail.sbatch"
    script.write_text(gen.stdout)
    assert run_script(script, tmp_path, "the plain script whose setup fails") == "FAILED"
    [run] = (tmp_path / "runs").iterdir()
    node_log = next((run / "logs").glob("*-stnode2.out")).read_text()
    assert 'setup line failed on stnode2 with exit status 1: test "$SLURMD_NODENAME" != stnode2' in node_log


def test_the_stop_signal_reaches_the_plain_scripts_program_not_its_shell(tmp_path):
    """#SBATCH --signal=B: signals the batch shell, which a plain script leaves untrapped: it
    died of the USR2 at the warning (the job FAILED two minutes early and the program never
    heard). The plain script has Slurm signal the program's processes instead."""
    code = ("import signal, sys\n"
            "signal.signal(signal.SIGUSR2, lambda *_: (print('got the stop signal', flush=True), sys.exit(0)))\n"
            "signal.pause()\n")  # until the signal; without it, the time limit ends the job (TIMEOUT)
    gen = cli(tmp_path, "gen", "--plain", "--profile", "local", "--launcher", "srun", "--nodes", "1",
              # the warning due 75 s in, well after the handler is installed (Slurm may send one
              # due within its 30-second tick at once)
              "--set", "launch.procs_per_node=1", "--time", "2", "--set", "resilience.signal_seconds=45",
              "--name", "plainsig", "--", sys.executable, "-c", code)
    assert gen.returncode == 0, gen.stderr
    assert "#SBATCH --signal=USR2@45" in gen.stdout
    script = tmp_path / "plainsig.sbatch"
    script.write_text(gen.stdout)
    assert run_script(script, tmp_path, "the plain script told to stop") == "COMPLETED"
    [run] = (tmp_path / "runs").iterdir()
    assert "got the stop signal" in "".join(p.read_text() for p in (run / "logs").glob("*.out"))
