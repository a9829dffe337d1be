"""TOML parsing in one place: the standard library's ``tomllib`` (3.11+), else ``tomli``.

setup.cfg allows Python 3.10, where ``tomllib`` does not exist yet; tomli is the same
parser published separately (a dependency below 3.11). Modules import ``tomllib``,
``loads`` or ``TOMLDecodeError`` from here, never ``tomllib`` itself
(tests/test_python310.py checks).
"""

from __future__ import annotations

import sys

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised under Python 3.10 only
    import tomli as tomllib

loads = tomllib.loads
TOMLDecodeError = tomllib.TOMLDecodeError

__all__ = ["tomllib", "loads", "TOMLDecodeError"]
