"""One reader of metrics.jsonl (``runs.progress.read_metrics``): status, watch, plot and the
trainer's trackers (the last step they already have) see the same records."""

from __future__ import annotations

import json

from slurmtrain.runs.progress import last_step, read_metrics
from slurmtrain.train.tracking import last_logged_step


def test_damaged_lines_are_skipped_alike_by_every_reader(tmp_path):
    lines = [json.dumps({"step": 1, "loss": 5.0}), json.dumps({"step": 2, "loss": 4.0}),
             json.dumps({"step": 2, "eval_loss": 4.5}), json.dumps({"step": 1, "loss": 4.9}),
             '{"step": 3, "loss": 3.', json.dumps({"step": True, "loss": 1.0}),
             json.dumps({"step": "9", "loss": 1.0}), json.dumps([1, 2]), "not json"]
    (tmp_path / "metrics.jsonl").write_bytes(("\n".join(lines) + "\n").encode() + b'{"step": 7, "x": "\xff"}\n')
    train, evals = read_metrics(tmp_path)
    assert [(r["step"], r.get("loss")) for r in train] == [(1, 4.9), (2, 4.0), (7, None)]  # the latest of a step wins
    assert [(r["step"], r["eval_loss"]) for r in evals] == [(2, 4.5)]
    # The line with a byte that is not UTF-8 is still a record of step 7 (the byte replaced).
    assert last_step(tmp_path) == last_logged_step(tmp_path) == 7


def test_no_file_is_no_records(tmp_path):
    assert read_metrics(tmp_path) == ([], [])
    assert last_step(tmp_path) == last_logged_step(tmp_path) == 0
