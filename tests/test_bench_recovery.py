"""scripts/bench_recovery.py's arithmetic and its refusal of bad input (the measuring itself
needs the sandbox and minutes: its figures are in BENCHMARKS.md, not in a test)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench_recovery.py"


def load():
    spec = importlib.util.spec_from_file_location("bench_recovery", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_summary_gives_each_path_against_the_cold_start_and_the_goals():
    rows = [{"in_job_s": 9.0, "detected_s": 1.0, "relaunch_to_step_s": 8.0, "requeue_s": 150.0,
             "cold_plus_load_s": 10.0, "queue_s": 125.0},
            {"in_job_s": 11.0, "detected_s": 1.2, "relaunch_to_step_s": 9.8, "requeue_s": 160.0,
             "cold_plus_load_s": 12.0, "queue_s": 130.0}]
    text = load().summary(rows, cold=8.0, release_after=None)
    assert "| in-job recovery: kill to first step | 10.0 (9.0-11.0) | 0.91x |" in text
    assert "| cold start-up, no checkpoint (first start) | 8.0 | 0.73x |" in text
    assert "| requeue: requeue to first step (Slurm's own hold) | 155.0 (150.0-160.0) | 14.09x |" in text
    assert text.endswith("in-job recovery / (cold start-up + load) = 0.91 (goal: at most 1.5); "
                         "requeue / in-job = 15.5x (goal: several times)")


def test_zero_rounds_is_refused_in_one_line():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--rounds", "0"], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.strip() == "bench_recovery: --rounds must be at least 1"
