"""Bash functions of a rendered job script, taken out and run on their own.

The tests run the REAL functions (``event``, ``program_finished``, ``program_saved``) as
``slurmtrain gen`` writes them, not a copy: a change to the templates shows here.
"""

from __future__ import annotations

import functools
import re
import shlex
import shutil
import subprocess
from pathlib import Path

from click.testing import CliRunner


@functools.lru_cache(maxsize=None)
def rendered_script(profile: str = "local") -> str:
    """The job script `slurmtrain gen --profile PROFILE -- python3 x.py` prints."""
    from slurmtrain.cli import main

    result = CliRunner().invoke(main, ["gen", "--profile", profile, "--", "python3", "x.py"])
    assert result.exit_code == 0, result.output
    return result.output


def function(name: str, script: str | None = None) -> str:
    """The text of bash function ``name`` (``name() {`` at the start of a line up to the
    first ``}`` alone at the start of a line)."""
    script = rendered_script() if script is None else script
    m = re.search(rf"^{re.escape(name)}\(\) \{{.*?^\}}$", script, re.M | re.S)
    assert m, f"no function {name}() in the rendered script"
    return m.group(0)


def run_bash(functions: list[str], body: str, run_dir: Path, args: list[str | bytes] = (),
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``body`` under ``bash -uo pipefail`` (as the job script runs) after the named
    functions are defined, with ``RUN_DIR`` set; ``args`` are ``$1``, ``$2``, ..."""
    defs = "\n".join(function(f) for f in functions)
    script = f"set -uo pipefail\nRUN_DIR={shlex.quote(str(run_dir))}\nRESTARTS=${{RESTARTS:-0}}\n{defs}\n{body}\n"
    bash = shutil.which("bash") or "/bin/bash"  # found here: a test may give the script a PATH without it
    return subprocess.run([bash, "-c", script, "bash", *args], capture_output=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", **(env or {})})
