"""Where the built-in templates and configs are.

In the repository they live at the top level (``templates/``, ``configs/``); an
installed wheel carries them as ``slurmtrain/_templates`` and ``slurmtrain/_configs``
(setup.cfg maps them). Looking next to the package first makes both work.
"""

from __future__ import annotations

from pathlib import Path

_PKG = Path(__file__).resolve().parent


def _first(*candidates: Path) -> Path:
    for c in candidates:
        if c.is_dir():
            return c
    return candidates[-1]


def templates_dir() -> Path:
    return _first(_PKG / "_templates", _PKG.parent / "templates")


def configs_dir() -> Path:
    return _first(_PKG / "_configs", _PKG.parent / "configs")


def clusters_dir() -> Path:
    return configs_dir() / "clusters"


def recipes_dir() -> Path:
    return configs_dir() / "recipes"
