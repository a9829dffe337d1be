"""The import graph of ``slurmtrain/``, read from the source with ``ast`` (torch-free):
every import, wherever in a file (inside functions too), and the trainer's engine
registry's imports by name. Used by tests/test_layering.py and the trainer's own
structure test."""

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
