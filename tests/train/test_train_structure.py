"""The trainer's package stays readable: no import circle (no module of ``slurmtrain/train/``
imports one that imports it back, directly or through others, counting imports inside
functions and the engine registry's imports by name, ``engines.ENGINES``). Torch-free: read
from the source with ``ast``. (No function longer than a screen: tests/test_layering.py, for
the whole package.)"""

from __future__ import annotations

from import_graph import circles, graph


def test_the_trainer_package_has_no_import_circle():
    edges = graph()
    assert "slurmtrain.train.engines.fsdp2" in edges["slurmtrain.train.engines"]
    assert circles(edges, "slurmtrain.train") == []


def test_the_check_finds_a_circle():
    edges = {"slurmtrain.train.a": {"slurmtrain.train.b"}, "slurmtrain.train.b": {"slurmtrain.train.c"},
             "slurmtrain.train.c": {"slurmtrain.train.a"}, "slurmtrain.x": {"slurmtrain.train.a"}}
    assert circles(edges, "slurmtrain.train") == [["slurmtrain.train.a", "slurmtrain.train.b",
                                                    "slurmtrain.train.c", "slurmtrain.train.a"]]
