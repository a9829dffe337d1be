"""runs/pace.py: stretches of slow steps from metrics.jsonl, and the `status` line for them."""

from __future__ import annotations

import json

from slurmtrain.runs import pace, progress, track
from slurmtrain.runs.rundir import RunDir


def records(times: dict[int, float], every: int = 10, t0: float = 1000.0) -> list[dict]:
    """A record every ``every`` steps; ``times``: the mean step time of the record at that
    step (0.3 s when not given). Their wall times follow the steps."""
    out, now = [], t0
    for step in range(every, 10 * every + 1, every):
        t = times.get(step, 0.3)
        now += every * t
        out.append({"time": now, "step": step, "loss": 1.0, "step_time": t})
    return out


def test_a_stretch_at_four_times_the_pace_is_named_with_its_cost():
    recs = records({50: 1.2, 60: 1.2})
    [slow] = pace.slow_stretches(recs, [])
    assert (slow.first, slow.last, slow.factor) == (41, 60, 4.0)
    assert slow.cost_s == round(20 * (1.2 - 0.3), 1)  # 20 steps, 0.9 s each beyond the pace


def test_an_even_pace_and_a_little_jitter_are_not_slow():
    assert pace.slow_stretches(records({}), []) == []
    assert pace.slow_stretches(records({30: 0.4, 70: 0.42}), []) == []  # under 1.5x
    assert pace.slow_stretches(records({30: 0.5}, every=1), []) == []  # 1.7x for one step: 0.2 s, noise


def test_two_stretches_apart_are_two():
    got = pace.slow_stretches(records({20: 1.0, 70: 2.0, 80: 2.0}), [])
    assert [(s.first, s.last) for s in got] == [(11, 20), (61, 80)]
    assert pace.describe([s.to_json() for s in got]).startswith("steps 61-80 at 6.7x")  # the costliest first


def test_the_first_record_of_a_launch_is_its_warm_up_not_the_pace():
    recs = records({50: 3.0})
    restart = {"event": "relaunched", "time": recs[3]["time"] + 1}  # between steps 40 and 50
    assert pace.slow_stretches(recs, []) != []
    assert pace.slow_stretches(recs, [restart]) == []
    assert [a for a, _, _ in pace.intervals(recs, [restart])] == [11, 21, 31, 51, 61, 71, 81, 91]  # 41-50 left out


def test_records_without_a_step_time_are_skipped():
    recs = records({50: 1.2, 60: 1.2})
    recs[2] = {k: v for k, v in recs[2].items() if k != "step_time"}  # step 30
    assert [a for a, _, _ in pace.intervals(recs, [])] == [11, 41, 51, 61, 71, 81, 91]
    assert [(s.first, s.last) for s in pace.slow_stretches(recs, [])] == [(41, 60)]


def test_status_of_a_run_says_where_it_was_slow(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_text(json.dumps({"name": "run", "state": "submitted"}))
    (run / "events.jsonl").write_text("")
    (run / progress.METRICS_FILE).write_text("".join(json.dumps(r) + "\n" for r in records({50: 1.2, 60: 1.2})))
    [st] = track.statuses([RunDir(run)])
    assert st.slow == [{"first": 41, "last": 60, "factor": 4.0, "cost_s": 18.0}]
    [brief] = track.statuses([RunDir(run)], with_events=False)  # a table of runs does not read metrics
    assert brief.slow == []
