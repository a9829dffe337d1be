"""The trainer's package stays readable: no import circle (no module of ``slurmtrain/train/``
imports one that imports it back, directly or through others, counting imports inside
functions and the engine registry's imports by name, ``engines.ENGINES``), and no function
longer than a screen. Torch-free: read from the source with ``ast``."""

from __future__ import annotations

import ast
from pathlib import Path

import slurmtrain

PACKAGE = Path(slurmtrain.__file__).parent


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The slurmtrain modules ``name`` imports, wherever in the file."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return {m for m in found if m in known and m != name}


def graph() -> dict[str, set[str]]:
    from slurmtrain.train.engines import ENGINES

    modules = _modules()
    edges = {name: _imports(name, path, set(modules)) for name, path in modules.items()}
    edges["slurmtrain.train.engines"] |= set(ENGINES.values())  # imported by name when built
    return edges


def circles(edges: dict[str, set[str]], inside: str) -> list[list[str]]:
    """Every import circle through modules whose name starts with ``inside``."""
    found, state, stack = [], {}, []

    def visit(node: str) -> None:
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if not nxt.startswith(inside):
                continue
            if state.get(nxt) == "open":
                found.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = "done"

    for node in sorted(edges):
        if node.startswith(inside) and node not in state:
            visit(node)
    return found


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
