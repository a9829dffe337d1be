"""The house's floors: no import circle anywhere in ``slurmtrain/``, and no module importing
one on a floor above its own. A floor may import its own and those below.

0  what everything reads: errors, the TOML and schema loaders, the event log and its
   meaning, Slurm's text forms and version, the marks the job and the ranks leave (and
   where node memory is), the launchers' registry
1  the profile and its rendering, the stop contract (imported by users' programs)
2  what builds on them on either side: the job's supervisor, the recipes and the data
   path, the sandbox
3  the login node's operations (runs, doctor), the laptop's way to them (remote), and the
   trainer
4  the command line

And every function fits on a screen (under 60 lines, its decorators counted).

So the job's supervisor never imports ``runs/`` (the job runs on a compute node, the
status commands on a login node; what both read lives on floor 0), and ``recipes/`` never
imports ``train/`` (gen and submit check a recipe without the trainer).
"""

from __future__ import annotations

import ast

import pytest

from import_graph import PACKAGE, circles, graph

FLOORS = {
    0: {"slurmtrain", "_toml", "errors", "resources", "schema", "events", "eventlog", "exits", "slurmtext", "slurmversion",
        "heartbeat", "nodememory", "arrivals", "ledger", "dependents", "command", "sweep", "tracking", "shellwords", "launchers",
        "programlog", "runfiles", "recent", "dsconfig", "sbatchextra", "perms"},
    1: {"profile", "render", "stop"},
    2: {"job", "recipes", "data", "sandbox"},
    3: {"runs", "doctor", "train", "cadence", "remote"},
    4: {"cli", "__main__", "entry"},
}


def unit(module: str) -> str:
    """``slurmtrain.job.decide`` -> ``job``; ``slurmtrain`` -> ``slurmtrain``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def floor_of(module: str) -> int | None:
    return next((f for f, units in FLOORS.items() if unit(module) in units), None)


def upward(edges: dict[str, set[str]]) -> list[str]:
    """Every import of a module on a higher floor: ``a (floor) -> b (floor)``."""
    found = []
    for a, deps in sorted(edges.items()):
        for b in sorted(deps):
            if floor_of(b) > floor_of(a):
                found.append(f"{a} ({floor_of(a)}) -> {b} ({floor_of(b)})")
    return found


@pytest.fixture(scope="module")
def edges() -> dict[str, set[str]]:
    return graph()


def test_every_module_has_a_floor(edges):
    assert [m for m in edges if floor_of(m) is None] == [], "add its package or module to FLOORS"


def test_no_import_circle_anywhere(edges):
    assert circles(edges, "slurmtrain") == []


def test_no_module_imports_one_on_a_floor_above(edges):
    assert upward(edges) == []


def test_the_job_never_imports_runs_and_recipes_never_the_trainer(edges):
    """The two arrows that ran back up before slurmtext.py and recipes/trainer_args.py."""
    assert not [b for a, deps in edges.items() if unit(a) == "job" for b in deps if unit(b) == "runs"]
    assert not [b for a, deps in edges.items() if unit(a) == "recipes" for b in deps if unit(b) == "train"]


def test_the_checks_can_fail():
    """On the arrows this tree had before: each is found."""
    before = {"slurmtrain.job.slurm": {"slurmtrain.runs.slurmquery"},
              "slurmtrain.runs.slurmquery": set(),
              "slurmtrain.runs.track": {"slurmtrain.runs.chain", "slurmtrain.job.slurm"},
              "slurmtrain.runs.chain": {"slurmtrain.runs.track"},
              "slurmtrain.recipes.jobcheck": {"slurmtrain.train.__main__"},
              "slurmtrain.train.__main__": {"slurmtrain.recipes.jobcheck"}}
    assert upward(before) == ["slurmtrain.job.slurm (2) -> slurmtrain.runs.slurmquery (3)",
                              "slurmtrain.recipes.jobcheck (2) -> slurmtrain.train.__main__ (3)"]
    assert sorted(map(tuple, circles(before, "slurmtrain"))) == [
        ("slurmtrain.recipes.jobcheck", "slurmtrain.train.__main__", "slurmtrain.recipes.jobcheck"),
        ("slurmtrain.runs.chain", "slurmtrain.runs.track", "slurmtrain.runs.chain")]


MAX_LINES = 60


def long_functions(root=PACKAGE) -> list[str]:
    """``path:line name (N lines)`` of each function of MAX_LINES or more, decorators counted
    (a click command's options are part of what a reader must take in)."""
    long = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([node.lineno] + [d.lineno for d in node.decorator_list])
                if node.end_lineno - start + 1 >= MAX_LINES:
                    long.append(f"{path.relative_to(root)}:{start} {node.name} ({node.end_lineno - start + 1} lines)")
    return long


def test_no_function_is_longer_than_a_screen():
    assert long_functions() == []


def test_the_length_check_counts_decorators(tmp_path):
    options = "".join(f"@click.option('--o{i}')\n" for i in range(50))
    (tmp_path / "cmd.py").write_text(options + "def cmd(**kw):\n" + "    pass\n" * 9)
    assert long_functions(tmp_path) == ["cmd.py:1 cmd (60 lines)"]
