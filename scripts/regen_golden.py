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

# README.md shows the aws-p4d script whole (tests/gen/test_readme.py)
import re  # noqa: E402

from gen.test_readme import REPO, rendered  # noqa: E402

readme = REPO / "README.md"
text = readme.read_text()
script = rendered()
text = re.sub(r"(<!-- job-script:start[^\n]*\n```bash\n).*?(```\n<!-- job-script:end -->)",
              lambda m: m.group(1) + script + m.group(2), text, flags=re.S)
text = re.sub(r"For `aws-p4d` at 4\nnodes it is \d+ lines", f"For `aws-p4d` at 4\nnodes it is {len(script.splitlines())} lines",
              text)
readme.write_text(text)
print(f"wrote the job script in {readme}")
