"""resilience.checkpoint_every = "auto" (slurmtrain/cadence.py): the Young-Daly interval from the
measured checkpoint cost and step time and the job's mean time between faults, the same on
every rank, and what status says of it."""

from __future__ import annotations

import json
import math

import pytest

from slurmtrain import events
from slurmtrain import cadence


def test_young_daly_from_the_profiles_node_mtbf_shrinking_with_nodes():
    one = cadence.choose(cost_s=30, step_s=2, node_mtbf_h=5000, nodes=1)
    many = cadence.choose(cost_s=30, step_s=2, node_mtbf_h=5000, nodes=128)
    assert one.job_mtbf_h == 5000 and many.job_mtbf_h == pytest.approx(5000 / 128)
    assert many.seconds == pytest.approx(math.sqrt(2 * 30 * 5000 / 128 * 3600))
    assert many.steps == round(many.seconds / 2) and one.steps > many.steps


def test_faults_the_run_met_make_it_save_more_often():
    calm = cadence.choose(cost_s=10, step_s=1, node_mtbf_h=1000, nodes=8, faults=0, node_hours=100)
    flaky = cadence.choose(cost_s=10, step_s=1, node_mtbf_h=1000, nodes=8, faults=5, node_hours=100)
    assert flaky.job_mtbf_h == pytest.approx(1100 / 6 / 8) and flaky.steps < calm.steps


def test_the_runs_faults_are_counted_from_its_events_not_its_stops(tmp_path):
    for name, fields in (("started", {"nodes": "a b", "job_id": "1", "restart": 0}), ("first_step", {"step": 1}),
                         ("relaunched", {"attempt": 1, "exit_code": 1}), ("first_step", {"step": 2}),
                         ("stopped", {"step": 3}), ("preempted", {"exit_code": 75}), ("requeue", {"exit_code": 75})):
        events.append(tmp_path, name, **fields)
    faults, node_hours = cadence.run_faults(tmp_path)
    assert faults == 1 and node_hours >= 0  # the crash; the preemption is a stop


def test_cadence_waits_for_a_timed_step_then_follows_its_choice(tmp_path):
    c = cadence.Cadence(node_mtbf_h=1.0, nodes=2, run_dir=tmp_path, first=5)
    assert c.due(5, -1) and not c.due(4, -1) and c.due(12, 7) and not c.due(11, 7)
    assert c.after_save(1.0) is None          # no step timed yet: keep the first interval
    for t in (0.0, 0.5, 1.0, 1.5):
        c.tick(t)
    c.tick(9.0, saved=True)                    # a save's time is no step's
    chosen = c.after_save(cost_s=0.2)
    assert chosen.step_s == 0.5 and chosen.steps == round(math.sqrt(2 * 0.2 * 0.5 * 3600) / 0.5)


def test_auto_is_read_from_the_job_scripts_environment(monkeypatch):
    monkeypatch.delenv(cadence.ENV_MODE, raising=False)
    assert cadence.auto() is None
    monkeypatch.setenv(cadence.ENV_MODE, "auto")
    monkeypatch.setenv(cadence.ENV_MTBF, "2500")
    assert cadence.auto() == 2500.0


def test_the_profile_key_reaches_the_script_only_when_auto():
    from slurmtrain.profile import load_profile
    from slurmtrain.render import JobSpec, render

    job = JobSpec(command=("python3", "-m", "slurmtrain.train", "--recipe", "tiny-demo"))
    assert "SLURMTRAIN_CHECKPOINT_EVERY" not in render(load_profile("local"), job)
    script = render(load_profile("local", ['resilience.checkpoint_every="auto"', "resilience.node_mtbf_hours=800"]),
                    job)
    assert "export SLURMTRAIN_CHECKPOINT_EVERY=auto\n" in script and "export SLURMTRAIN_NODE_MTBF_HOURS=800\n" in script


def test_an_infinite_mtbf_is_refused_naming_the_key_not_a_division_by_zero_at_the_first_save():
    from slurmtrain.errors import ConfigError
    from slurmtrain.profile import load_profile

    for value in ("inf", "+inf"):
        with pytest.raises(ConfigError, match=r"resilience.node_mtbf_hours: expected a finite positive number"):
            load_profile("local", ['resilience.checkpoint_every="auto"', f"resilience.node_mtbf_hours={value}"])


@pytest.mark.slow  # two ranks of the trainer for 40 steps: about 20 s, the fast lane's longest by far
@pytest.mark.torch
def test_the_trainer_saves_on_the_chosen_interval_on_every_rank(tmp_path):
    pytest.importorskip("torch")
    from trainer_util import setup_run, show, train

    recipe = setup_run(tmp_path, steps=40, save_steps=5)
    proc = train(["--recipe", str(recipe), "--run-dir", "run", "--set", "train.eval_steps=0"], tmp_path, nproc=2,
                 SLURMTRAIN_CHECKPOINT_EVERY="auto", SLURMTRAIN_NODE_MTBF_HOURS="0.0002", SLURMTRAIN_NNODES="2")
    assert proc.returncode == 0, show(proc)  # ranks that chose differently would have hung in the save
    evs = [json.loads(line) for line in (tmp_path / "run" / "events.jsonl").read_text().splitlines()]
    saved = [e["step"] for e in evs if e["event"] == "checkpoint_saved"]
    assert saved[0] == 5                                      # the recipe's save_steps, to time a save
    chosen = [e for e in evs if e["event"] == "checkpoint_interval"]
    assert chosen, evs
    first = chosen[0]
    assert first["nodes"] == 2 and first["cost_s"] > 0 and first["step_s"] > 0
    assert first["job_mtbf_h"] == pytest.approx(0.0001)
    # Each save follows the choice made after the save before it (the last one is the run's
    # end). A background save is reported when durable, after that choice: go by steps.
    choices = {e["after_step"]: e["steps"] for e in chosen}
    every, last = 5, 0
    for step in (s for s in saved if s < 40):
        assert step - last == every, (saved, chosen)
        every, last = choices.get(step, every), step


@pytest.mark.slow  # two ranks of the trainer: about 8 s, the fast lane's longest
@pytest.mark.torch
def test_copies_in_node_memory_follow_a_cadence_of_their_own(tmp_path):
    """train.memory_steps under checkpoint_every = "auto": the first copy at the recipe's
    memory_steps, then the Young-Daly interval from what a copy stalls, every rank the same;
    the durable saves keep theirs (save_steps 0: the first at Cadence.FIRST_STEPS, past the end)."""
    pytest.importorskip("torch")
    from trainer_util import setup_run, show, train

    recipe = setup_run(tmp_path, steps=30, save_steps=0)
    proc = train(["--recipe", str(recipe), "--run-dir", "run", "--set", "train.eval_steps=0",
                  "--set", "train.memory_steps=3"], tmp_path, nproc=2,
                 SLURMTRAIN_CHECKPOINT_EVERY="auto", SLURMTRAIN_NODE_MTBF_HOURS="50", SLURMTRAIN_NNODES="1",
                 SLURMTRAIN_MEMORY_DIR=str(tmp_path / "shm"))
    assert proc.returncode == 0, show(proc)  # ranks that chose differently would have hung in the copy
    evs = [json.loads(line) for line in (tmp_path / "run" / "events.jsonl").read_text().splitlines()]
    chosen = [e for e in evs if e["event"] == "checkpoint_interval"]
    assert chosen and all(e.get("tier") == "memory" for e in chosen), chosen  # no durable save before the end
    first = chosen[0]
    assert first["after_step"] == 3 and first["cost_s"] > 0 and first["step_s"] > 0, first
    # 50 h between faults: sqrt(2 x C x 50 h) is minutes, far past the run's 30 steps of
    # under a second: one choice, and no copy after the first.
    assert len(chosen) == 1 and first["steps"] > 30 and first["seconds"] > 30 * first["step_s"], chosen
    # every rank chose from the slowest's figures, the ones shown: steps x step time is the interval
    # (each rank's own, the largest winning, once showed rank 0's figures beside another's steps)
    # (the event's figures have 4 significant digits)
    assert abs(first["steps"] * first["step_s"] - first["seconds"]) <= first["step_s"] / 2 + 1e-3 * first["seconds"], \
        first
    saved = [e["step"] for e in evs if e["event"] == "checkpoint_saved"]
    assert saved == [30], saved  # the end's save only

    from slurmtrain.cadence import describe
    from slurmtrain.runs import classify
    assert describe(first).startswith(f"every {first['steps']} steps") and "per copy in node memory" in describe(first)
    assert f"copies in node memory every {first['steps']} steps from now" in "\n".join(classify.history(tmp_path / "run"))
