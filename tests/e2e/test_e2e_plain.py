"""`slurmtrain gen --plain`: the unsupervised script (the task and one srun) runs a real
2-node job on the sandbox, as a site without slurmtrain on its batch hosts would use it."""

from __future__ import annotations

import json
import os
import sys

import pytest

import waiting
from e2e_util import PROGRAM, cli

pytestmark = pytest.mark.slurm


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
    proc = waiting.run(["sbatch", "--wait", str(script)], f"the plain {launcher} script", [runs],
                       cwd=tmp_path, env=dict(os.environ))
    assert proc.returncode == 0, proc.stdout + proc.stderr
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
    proc = waiting.run(["sbatch", "--wait", str(script)], "the plain script whose setup fails", [tmp_path / "runs"],
                       cwd=tmp_path, env=dict(os.environ))
    assert proc.returncode != 0
    [run] = (tmp_path / "runs").iterdir()
    node_log = next((run / "logs").glob("*-stnode2.out")).read_text()
    assert 'setup line failed on stnode2 with exit status 1: test "$SLURMD_NODENAME" != stnode2' in node_log
