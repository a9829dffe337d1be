"""The trainer's package stays readable: no import circle (no module of ``slurmtrain/train/``
imports one that imports it back, directly or through others, counting imports inside
functions and the engine registry's imports by name, ``engines.ENGINES``), and no function
longer than a screen. Torch-free: read from the source with ``ast``."""

from __future__ import annotations

import ast

from import_graph import PACKAGE, circles, graph


def test_the_trainer_package_has_no_import_circle():
    edges = graph()
    assert "slurmtrain.train.engines.fsdp2" in edges["slurmtrain.train.engines"]
    assert circles(edges, "slurmtrain.train") == []


def test_the_check_finds_a_circle():
    edges = {"slurmtrain.train.a": {"slurmtrain.train.b"}, "slurmtrain.train.b": {"slurmtrain.train.c"},
             "slurmtrain.train.c": {"slurmtrain.train.a"}, "slurmtrain.x": {"slurmtrain.train.a"}}
    assert circles(edges, "slurmtrain.train") == [["slurmtrain.train.a", "slurmtrain.train.b",
                                                    "slurmtrain.train.c", "slurmtrain.train.a"]]


MAX_LINES = 60


def test_no_function_of_the_trainer_is_longer_than_a_screen():
    long = []
    for path in (PACKAGE / "train").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines >= MAX_LINES:
                    long.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name} ({lines} lines)")
    assert long == []
