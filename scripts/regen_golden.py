#!/usr/bin/env python3
"""Rewrite tests/golden/*.sbatch from the current templates and built-in profiles.

Run after an intended change to templates or profiles, then review `git diff tests/golden`.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gen.golden import GOLDEN_DIR, cases, golden_path, render_case  # noqa: E402

GOLDEN_DIR.mkdir(exist_ok=True)
for old in GOLDEN_DIR.glob("*.sbatch"):
    old.unlink()
for profile, launcher in cases():
    golden_path(profile, launcher).write_text(render_case(profile, launcher))
    print(f"wrote {golden_path(profile, launcher)}")
