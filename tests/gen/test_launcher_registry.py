"""A fifth launcher, added from this file alone: what adding one takes is its spec (in the
project: its module under slurmtrain/launchers/) and its line in the registry. The
profile's check, the CLI's --launcher, the rendered script, the supervisor's command line
and its srun shape all take it from there; nothing else in slurmtrain/ or templates/ names
a launcher (the last test keeps it so)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmtrain import launchers
from slurmtrain.cli import main
from slurmtrain.job import __main__ as job_main
from slurmtrain.job.step import Launch
from slurmtrain.launchers import Launcher, Words
from slurmtrain.profile import load_profile
from slurmtrain.render import JobSpec, render
from slurmtrain.shellwords import Raw

ROOT = Path(__file__).resolve().parents[2]


def hydra_words(w: Words) -> list[str]:
    """A per-node agent of its own: started once per node, told the node's rank."""
    return [w.python, "-m", "hydra_agent", Raw('--nodes="$SLURMTRAIN_NNODES"'), Raw('--node="$node_rank"'),
            *({"module": ["-m"], "script": [], "exec": ["--exec"]}[w.kind])]


HYDRA = Launcher("hydra", "a per-node agent of its own", hydra_words,
                 env=lambda nodes, procs, run_dir, job_id: {"HYDRA_HOSTS": ",".join(nodes)})


@pytest.fixture
def hydra():
    launchers.LAUNCHERS["hydra"] = HYDRA   # the registry line
    yield HYDRA
    del launchers.LAUNCHERS["hydra"]


def test_a_fifth_launcher_renders_a_script_that_starts_it_on_every_node(hydra):
    loaded = load_profile("local", ['launch.launcher="hydra"', "slurm.nodes=2", "launch.procs_per_node=2"])
    script = render(loaded, JobSpec(command=("python3", "train.py", "--lr", "3e-4")))
    assert "--ntasks-per-node=1" in script                              # an agent per node
    assert re.search(r'python3 -m hydra_agent --nodes="\$SLURMTRAIN_NNODES" --node="\$node_rank" \\\n\s+train\.py '
                     r"--lr 3e-4", script), script
    assert "local node_rank=${1:-$SLURM_NODEID}" in script
    assert "--launcher hydra" in script                                 # the supervisor is told which
    assert "TORCH_ELASTIC_SHUTDOWN_TIMEOUT" not in script               # not a torch elastic agent


def test_the_profile_the_cli_and_the_supervisor_take_it_from_the_registry(hydra, tmp_path):
    assert load_profile("local", ['launch.launcher="hydra"']).profile.launch.launcher == "hydra"
    assert "hydra" in load_profile("local").profile.allowed_launchers
    result = CliRunner().invoke(main, ["gen", "-p", "local", "--launcher", "hydra", "--", "python3", "t.py"])
    assert result.exit_code == 0 and "hydra_agent" in result.output, result.output
    assert job_main.parse(["--launcher", "hydra"]).launcher == "hydra"
    env = Launch("hydra", 2, tmp_path).environment(["n1", "n2"])
    assert env["HYDRA_HOSTS"] == "n1,n2" and env["SLURMTRAIN_NNODES"] == "2"


def test_an_unknown_launcher_is_refused_naming_the_registered_ones(tmp_path):
    with pytest.raises(Exception, match=r"launch\.launcher: expected one of 'torchrun', 'srun-loop', 'deepspeed', "
                                        r"'srun', got string 'hydra'"):
        load_profile("local", ['launch.launcher="hydra"'])
    result = CliRunner().invoke(main, ["gen", "-p", "local", "--launcher", "hydra", "--", "python3", "t.py"])
    assert result.exit_code == 2 and "'hydra' is not one of 'torchrun'" in result.output


# Where DeepSpeed and torchrun are named as what they are besides launchers: the trainer's
# DeepSpeed engine and its recipes, users' commands that name a launcher (taken over there),
# the packages doctor's node checks find installed.
NOT_LAUNCHERS = {"train", "recipes", "stop", "data", "launchers"}
NAMES = "|".join(re.escape(n) for n in ("torchrun", "srun-loop", "deepspeed"))  # "srun" is a command too
BRANCH = re.compile(rf"launcher\s*(==|!=|in\b)|[\"']({NAMES})[\"']")


def branches(root: Path) -> list[str]:
    """Lines of ``root``'s slurmtrain/ and templates/ that tell launchers apart by name."""
    found = []
    for path in sorted([*(root / "slurmtrain").rglob("*.py"), *(root / "templates").glob("*.j2")]):
        rel = path.relative_to(root)
        if NOT_LAUNCHERS & set(rel.parts[1:-1]) or str(rel) in ("slurmtrain/command.py", "slurmtrain/doctor/node.py"):
            continue
        for i, line in enumerate(path.read_text().splitlines(), start=1):
            if BRANCH.search(line) and 'field(launchers.doc(), "torchrun"' not in line:  # the profile's default
                found.append(f"{rel}:{i}: {line.strip()}")
    return found


def test_no_file_outside_the_registry_tells_launchers_apart_by_name():
    assert branches(ROOT) == []


def test_the_check_finds_a_branch_on_a_name(tmp_path):
    (tmp_path / "slurmtrain" / "job").mkdir(parents=True)
    (tmp_path / "templates").mkdir()
    (tmp_path / "slurmtrain" / "job" / "step.py").write_text('if self.launcher == "srun":\n    pass\n')
    (tmp_path / "templates" / "t.j2").write_text('{% if L.agent %}\n{{ "deepspeed" }}\n{% endif %}\n')
    assert branches(tmp_path) == ['slurmtrain/job/step.py:1: if self.launcher == "srun":',
                                  'templates/t.j2:2: {{ "deepspeed" }}']
