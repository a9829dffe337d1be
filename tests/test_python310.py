"""Python 3.10 (setup.cfg: python_requires >= 3.10): TOML comes from tomli there.

``tomllib`` joined the standard library in 3.11. Every module reads TOML through
``slurmtrain._toml``, which falls back to tomli (a dependency below 3.11, see setup.cfg).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "slurmtrain"
REPO = PACKAGE.parent
_IMPORT = re.compile(r"^\s*(import\s+tomllib\b|from\s+tomllib\s+import\b)", re.M)
_GUARD = PACKAGE / "_toml.py"  # the one place allowed to import tomllib itself


def unguarded_imports() -> list[str]:
    hits = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == _GUARD:
            continue
        for m in _IMPORT.finditer(path.read_text(encoding="utf-8")):
            line = path.read_text(encoding="utf-8").count("\n", 0, m.start()) + 1
            hits.append(f"{path.relative_to(REPO)}:{line}")
    return hits




def test_no_module_imports_tomllib_itself():
    hits = unguarded_imports()
    assert not hits, ("`import tomllib` fails on Python 3.10; use `from slurmtrain._toml "
                      "import tomllib` (or its loads/TOMLDecodeError) instead: " + ", ".join(hits))


def test_toml_shim_falls_back_to_tomli(monkeypatch):
    """Without tomllib (as on 3.10) the shim hands out tomli, with the same names."""
    import importlib
    import sys
    import tomllib
    import types

    tomli = types.ModuleType("tomli")  # tomli is tomllib's upstream: the same two names
    tomli.loads, tomli.TOMLDecodeError = tomllib.loads, tomllib.TOMLDecodeError
    monkeypatch.setitem(sys.modules, "tomli", tomli)
    monkeypatch.setitem(sys.modules, "tomllib", None)  # `import tomllib` now raises ImportError
    monkeypatch.setattr(sys, "version_info", (3, 10, 13, "final", 0))
    monkeypatch.delitem(sys.modules, "slurmtrain._toml", raising=False)
    try:
        shim = importlib.import_module("slurmtrain._toml")
        assert shim.tomllib is tomli
        assert shim.loads("a = 1") == {"a": 1}
        with pytest.raises(shim.TOMLDecodeError):
            shim.loads("a = ")
    finally:
        sys.modules.pop("slurmtrain._toml", None)  # the next import finds the real tomllib


def _python310() -> str | None:
    """A Python 3.10 with the CLI's dependencies (click, jinja2, tomli), if this machine has one."""
    candidates = [os.environ.get("SLURMTRAIN_PYTHON310"), shutil.which("python3.10"),
                  *sorted(map(str, Path("/root/.pyenv/versions").glob("3.10.*/bin/python")))]
    for exe in filter(None, candidates):
        probe = subprocess.run([exe, "-c", "import click, jinja2, tomli"], capture_output=True)
        if probe.returncode == 0:
            return exe
    return None


def test_cli_imports_and_renders_under_python310(tmp_path):
    exe = _python310()
    if exe is None:  # scripts/test.sh installs them into the machine's 3.10 where it has one
        pytest.skip("this machine has no Python 3.10 with click, jinja2 and tomli (set SLURMTRAIN_PYTHON310)")
    code = ("import sys; from click.testing import CliRunner; from slurmtrain.cli import main\n"
            "assert sys.version_info[:2] == (3, 10)\n"
            "r = CliRunner().invoke(main, ['gen', '-p', 'aws-p4d', '--set', 'slurm.nodes=2', '--', 'python', 'x.py'])\n"
            "assert r.exit_code == 0, r.output\n"
            "r = CliRunner().invoke(main, ['models']); assert r.exit_code == 0, r.output\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), "XDG_CACHE_HOME": str(tmp_path)}
    proc = subprocess.run([exe, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
