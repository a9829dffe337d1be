"""The container lane's fixtures (scripts/container_lane.sh runs these tests as an ordinary
user, inside its Debian 13 tree, against its own sandbox, which it brings up as root)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

for _helpers in ("survival", "tracking"):  # survival_util and readback, as their own tests import them
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / _helpers))

from survival_util import run_cli  # noqa: E402


@pytest.fixture(scope="session")
def workdir(tmp_path_factory) -> Path:
    """Where the user submits from: the demo corpus tiny-demo reads, and the profile."""
    if os.getuid() == 0:
        pytest.fail("the container tests run as an ordinary user (scripts/container_lane.sh)")
    d = tmp_path_factory.mktemp("containers")
    run_cli(["demo-corpus", "--max-mb", "0.5"], cwd=d)
    return d
