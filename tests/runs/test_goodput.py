"""Goodput from a run's events (runs/goodput.py): each second of an allocation in one
part, each interruption charged what it cost. Events are written with their times as
the supervisor, the program and the CLI would."""

from __future__ import annotations

import pytest

from slurmtrain.runs import goodput
from slurmtrain.runs.goodput import _Claim, _paint


def ev(t: float, name: str, **fields) -> dict:
    return {"time": t, "event": name, **fields}


def parts(g: goodput.Goodput) -> dict[str, float]:
    return {p: round(g.node_seconds(p), 3) for p in goodput.PARTS if g.node_seconds(p)}


def test_a_run_without_faults_is_start_up_trained_steps_checkpoints_and_its_end():
    evs = [ev(0, "submitted", job_id="7"), ev(10, "started", job_id="7", restart=0, nodes="a b"),
           ev(20, "first_step", step=1, at=19), ev(50, "checkpoint_saved", step=10, seconds=5),
           ev(100, "finished", step=20), ev(102, "finished", exit_code=0, job_id="7", restart=0)]
    g = goodput.of_events(evs)
    assert parts(g) == {"startup": 18, "trained": 152, "checkpoint": 10, "other": 4}
    assert g.allocated == 184 and g.queue_s == 10
    assert g.share == pytest.approx(152 / 184)
    assert g.faults == [] and g.progress_known


def test_a_crash_restarted_in_the_job_costs_the_steps_since_the_checkpoint_and_the_restart():
    evs = [ev(0, "started", nodes="a", job_id="7", restart=0), ev(10, "first_step", step=1),
           ev(30, "checkpoint_saved", step=10, seconds=2),
           ev(50, "relaunched", attempt=1, exit_code=1, last_progress=45),
           ev(60, "first_step", step=11), ev(100, "finished", step=20), ev(101, "finished", exit_code=0)]
    g = goodput.of_events(evs)
    assert parts(g) == {"startup": 10, "checkpoint": 2, "lost": 15, "restart": 15, "trained": 58, "other": 1}
    [crash] = g.faults
    assert crash.kind == "crash" and crash.in_job and "exit status 1" in crash.detail
    assert g.cost(0) == {"lost": 15, "restart": 15}


def test_a_background_save_costs_only_its_stall_and_the_steps_after_it_are_lost_on_a_crash():
    # Saved from 25 s (step 10), durable at 30 s; the training was held 0.5 s of it.
    evs = [ev(0, "started", nodes="a", job_id="7", restart=0), ev(10, "first_step", step=1),
           ev(30, "checkpoint_saved", step=10, seconds=5, stall=0.5),
           ev(50, "relaunched", attempt=1, exit_code=1, last_progress=45),
           ev(60, "first_step", step=11), ev(100, "finished", step=20), ev(101, "finished", exit_code=0)]
    g = goodput.of_events(evs)
    assert parts(g) == {"startup": 10, "checkpoint": 0.5, "lost": 19.5, "restart": 15, "trained": 55,
                        "other": 1}
    assert g.cost(0) == {"lost": 19.5, "restart": 15}


def test_a_save_a_users_program_reported_without_its_time_is_where_the_lost_steps_begin():
    # slurmtrain.stop.saved(step, path) writes no `seconds`: its cost is not known, but the
    # steps before it are kept (they were all counted lost, from the launch's first step).
    evs = [ev(0, "started", nodes="a", job_id="7", restart=0), ev(10, "first_step", step=1),
           ev(30, "checkpoint_saved", step=10, path="/ckpt/10"),
           ev(50, "relaunched", attempt=1, exit_code=1, last_progress=45),
           ev(60, "first_step", step=11), ev(100, "finished", step=20), ev(101, "finished", exit_code=0)]
    g = goodput.of_events(evs)
    assert parts(g) == {"startup": 10, "lost": 15, "restart": 15, "trained": 60, "other": 1}
    assert g.cost(0) == {"lost": 15, "restart": 15}


def test_a_crash_resumed_from_node_memory_loses_only_the_steps_after_the_copy():
    """A step a second from step 1 at 10 s; a durable save of step 20; killed at step 47
    (56 s); the next launch resumed from node memory at step 45. The lost steps were
    counted from the durable save (26 s), not from the copy (2 s)."""
    evs = [ev(0, "started", nodes="a", job_id="7", restart=0), ev(10, "first_step", step=1),
           ev(30, "checkpoint_saved", step=20, seconds=1),
           ev(60, "relaunched", attempt=1, exit_code=137, last_progress=56, last_step=47),
           ev(62, "resumed", step=45, tier="memory", seconds=0.3), ev(65, "first_step", step=46),
           ev(100, "finished", step=80), ev(101, "finished", exit_code=0)]
    g = goodput.of_events(evs)
    assert g.cost(0)["lost"] == 2, g.cost(0)
    without = [e for e in evs if e["event"] != "resumed"] + [ev(62, "resumed", step=20, seconds=0.3)]
    assert goodput.of_events(sorted(without, key=lambda e: e["time"])).cost(0)["lost"] == 26


def test_a_hang_costs_its_detection_the_lost_steps_and_the_restart():
    evs = [ev(0, "started", nodes="a", job_id="7", restart=0), ev(5, "first_step", step=1),
           ev(20, "checkpoint_saved", step=10, seconds=1),
           ev(80, "hang", seconds=40, ranks="1", nodes="b", step=17, stacks="s"),
           ev(85, "relaunched", attempt=1, exit_code=-15, last_progress=40),
           ev(95, "first_step", step=11), ev(120, "finished", step=30), ev(121, "finished", exit_code=0)]
    g = goodput.of_events(evs)
    assert parts(g) == {"startup": 5, "checkpoint": 1, "lost": 20, "hang": 40, "restart": 15, "trained": 39,
                        "other": 1}
    [hang] = g.faults
    assert hang.kind == "hang" and "rank(s) 1 on b" in hang.detail
    assert g.cost(0) == {"lost": 20, "hang": 40, "restart": 15}


def test_a_hangs_fault_names_the_rank_its_stacks_told_apart():
    """A SIGSTOPped rank 3 on c: its peers 0-2 on a and b reported last (they stop when it
    does). The fault row named them, the history the stopped rank: both now name rank 3."""
    evs = [ev(0, "started", nodes="a b c", job_id="7", restart=0), ev(5, "first_step", step=1),
           ev(80, "hang", seconds=40, ranks="0 1 2", nodes="a b", step=17, stacks="s", stuck_ranks="3",
              stuck_nodes="c", why="process state T (stopped: SIGSTOP, or a debugger)"),
           ev(85, "relaunched", attempt=1, exit_code=-15, last_progress=40),
           ev(95, "first_step", step=11), ev(120, "finished", step=30), ev(121, "finished", exit_code=0)]
    [hang] = goodput.of_events(evs).faults
    assert hang.detail == "no progress for 40 s; rank(s) 3 on c: process state T (stopped: SIGSTOP, or a debugger)"


def test_a_preemption_costs_its_stop_the_queue_wait_and_the_next_start_up():
    evs = [ev(0, "submitted", job_id="7"), ev(10, "started", nodes="a", job_id="7", restart=0),
           ev(20, "first_step", step=1), ev(40, "checkpoint_saved", step=10, seconds=2),
           ev(60, "checkpoint_saved", step=15, seconds=3), ev(60, "stopped", step=15),
           ev(61, "preempted", exit_code=75), ev(61.5, "requeue", exit_code=75),
           ev(200, "started", nodes="a", job_id="7", restart=1), ev(200, "restarted"),
           ev(210, "first_step", step=16), ev(250, "finished", step=30), ev(251, "finished", exit_code=0)]
    g = goodput.of_events(evs)
    assert parts(g) == {"startup": 20, "checkpoint": 5, "trained": 75, "other": 2.5}
    assert g.queue_s == 148.5
    [stop] = g.faults
    assert stop.kind == "preempted" and not stop.in_job and "requeued" in stop.detail
    assert g.cost(0) == {"other": 1.5, "queue": 138.5, "startup": 10}


def test_a_stops_background_save_is_checkpoint_time_not_lost_steps():
    """At a time limit the stop saves the step it reached in the background and waits for the
    write: training never went on, no step is lost (its write once read "lost steps 2 s" at
    every time limit)."""
    evs = [ev(0, "submitted", job_id="7"), ev(10, "started", nodes="a", job_id="7", restart=0),
           ev(20, "first_step", step=1), ev(40, "checkpoint_saved", step=10, seconds=2, stall=0.5),
           ev(62, "checkpoint_saved", step=15, seconds=2.5, stall=0.1), ev(62.2, "stopped", step=15),
           ev(63, "signal", signal="USR2"), ev(63, "requeue", exit_code=75)]
    g = goodput.of_events(evs)
    assert parts(g) == {"startup": 10, "checkpoint": 3.2, "trained": 39.0, "other": 0.8}  # 0.5 + the stop's 2.7
    [stop] = g.faults
    assert stop.kind == "time limit" and "lost" not in g.cost(0), g.cost(0)


def test_a_node_failure_that_slurm_requeued_loses_the_steps_since_the_checkpoint_on_every_node():
    evs = [ev(0, "started", nodes="a b", job_id="7", restart=0), ev(10, "first_step", step=1),
           ev(30, "checkpoint_saved", step=10, seconds=1), ev(50, "requeued_by_slurm"),
           ev(51, "failed", exit_code=1), ev(170, "started", nodes="a c", job_id="7", restart=1),
           ev(180, "first_step", step=11)]
    g = goodput.of_events(evs, now=200)
    assert g.faults[0].kind == "node failure"
    assert g.cost(0) == {"lost": 40, "other": 2, "queue": 119, "startup": 20}
    assert parts(g)["trained"] == 2 * (19 + 20)  # the running start counts up to now


def test_the_wait_until_slurm_noticed_a_quiet_node_is_a_hang_not_lost_steps():
    """A node's link cut at 35 s (the last progress); Slurm marked it down SlurmdTimeout
    later and requeued the job at 50 s. Those 15 s trained nothing and noticed nothing: a
    hang's, as when the supervisor sees it first, not steps trained and lost."""
    evs = [ev(0, "started", nodes="a b", job_id="7", restart=0), ev(10, "first_step", step=1),
           ev(30, "checkpoint_saved", step=10, seconds=1),
           ev(50, "requeued_by_slurm", by="node failure", nodes="b", last_progress=35),
           ev(51, "failed", exit_code=1), ev(170, "started", nodes="a c", job_id="7", restart=1),
           ev(180, "first_step", step=11)]
    g = goodput.of_events(evs, now=200)
    [fault] = g.faults
    assert fault.kind == "node failure" and "no progress for 15 s before Slurm noticed" in fault.detail, fault
    assert g.cost(0) == {"lost": 10, "hang": 30, "other": 2, "queue": 119, "startup": 20}


def test_an_administrators_requeue_the_program_saved_for_is_a_fault_with_its_cost():
    """`scontrol requeue`: the program saved and stopped; no faults row, no cost."""
    evs = [ev(0, "started", nodes="a", job_id="7", restart=0), ev(10, "first_step", step=1),
           ev(40, "requeued_by_slurm", by="scontrol requeue"), ev(45, "checkpoint_saved", step=30, seconds=1),
           ev(46, "stopped", step=30), ev(47, "failed", exit_code=143),
           ev(80, "started", nodes="a", job_id="7", restart=1), ev(90, "first_step", step=31)]
    g = goodput.of_events(evs, now=100)
    [fault] = g.faults
    assert (fault.kind, fault.in_job) == ("requeued", False) and fault.detail.endswith("; requeued"), fault
    assert g.cost(0)["queue"] == 33 and g.cost(0)["startup"] == 10, g.cost(0)


def test_a_failure_that_ends_the_run_is_charged_its_lost_steps():
    evs = [ev(0, "started", nodes="a", job_id="7", restart=0), ev(10, "first_step", step=1),
           ev(30, "checkpoint_saved", step=10, seconds=1), ev(40, "train_error", step=14, error="boom"),
           ev(41, "failed", exit_code=1)]
    g = goodput.of_events(evs, now=500)
    assert [f.kind for f in g.faults] == ["failed"]
    assert parts(g) == {"startup": 10, "trained": 19, "checkpoint": 1, "lost": 11}
    assert g.allocated == 41  # the job ended: `now` does not stretch it


def test_a_program_without_heartbeats_counts_as_trained_from_its_start_and_says_so():
    evs = [ev(0, "started", nodes="a", job_id="7", restart=0), ev(30, "checkpoint_saved", step=10),
           ev(60, "finished", step=20), ev(61, "finished", exit_code=0)]
    g = goodput.of_events(evs)
    assert not g.progress_known
    assert parts(g) == {"trained": 60, "other": 1}


def test_a_job_that_waits_in_the_queue_has_queue_time_and_nothing_allocated():
    g = goodput.of_events([ev(0, "submitted", job_id="7")], now=30)
    assert g.queue_s == 30 and g.allocated == 0 and g.share is None


@pytest.mark.parametrize("given_up", ["cancel_requested", "dependency_never_satisfied"])
def test_a_job_given_up_before_it_started_waited_until_then(given_up):
    g = goodput.of_events([ev(0, "submitted", job_id="7"), ev(12, given_up, job_id="7")], now=3000)
    assert g.queue_s == 12 and g.allocated == 0


def test_a_start_whose_setup_failed_trained_nothing_even_without_heartbeats():
    """`module load cuda/12.1` failed on every node: the program never ran. Counted as a
    program that sends no heartbeat, the start read "goodput 100%"."""
    evs = [ev(0, "submitted", job_id="7"), ev(2, "started", nodes="a b", job_id="7", restart=0),
           ev(5, "setup_failed", node="a", line="module load cuda/12.1", exit_code=127),
           ev(6, "watchdog_timeout", missing="a b"), ev(7, "failed", exit_code=1)]
    g = goodput.of_events(evs, now=100)
    assert g.share == 0 and parts(g) == {"startup": 10}, (g.share, parts(g))


def test_the_tasks_of_an_array_are_summed():
    def task(k: int) -> list[dict]:
        ident = {"job_id": f"7_{k}", "array_job_id": "7", "array_task": k, "restart": 0}
        return [ev(0, "started", nodes="a", array_tasks=2, **ident), ev(4, "first_step", step=1, **ident),
                ev(10, "finished", array_task=k), ev(10, "finished", exit_code=0, **ident)]
    g = goodput.of_events([ev(-1, "submitted", job_id="7", array_tasks=2), *task(0), *task(1)])
    assert parts(g) == {"startup": 8, "trained": 12}
    # both tasks waited the same second: the queue adds up, and status says it does
    assert (g.queue_s, g.tasks) == (2, 2)
    from slurmtrain.cli.runs import _goodput_rows
    # a run that never got nodes: "yet" only while it may still get them
    never = goodput.of_events([ev(0, "submitted", job_id="8"), ev(12, "cancel_requested", job_id="8")], now=50)
    assert _goodput_rows(never.to_json(), ended=True) == [("goodput", "- (nothing allocated; queue 12 s)")]
    assert _goodput_rows(never.to_json(), ended=False)[0][1].startswith("- (nothing allocated yet")
    assert _goodput_rows(g.to_json())[0][1].endswith("; queue 2 s, summed over 2 tasks"), _goodput_rows(g.to_json())
    # a program that failed as it started: was "0% of 0 s ...; lost steps 100%"
    gone = goodput.of_events([ev(0, "submitted", job_id="9"), ev(1, "started", job_id="9", restart=0, nodes="a"),
                              ev(1.4, "failed", job_id="9", restart=0, exit_code=1)])
    rows = _goodput_rows(gone.to_json())
    assert rows[0] == ("goodput", "- (under a second of node time: nothing to share out; queue 1 s)"), rows


def test_the_json_has_every_part_the_share_and_each_fault_with_its_cost():
    evs = [ev(0, "started", nodes="a", job_id="7", restart=0), ev(10, "first_step", step=1),
           ev(30, "relaunched", attempt=1, exit_code=9, last_progress=28), ev(35, "first_step", step=1),
           ev(60, "finished", step=9), ev(60, "finished", exit_code=0)]
    j = goodput.of_events(evs).to_json()
    assert set(j["node_s"]) == set(goodput.PARTS)
    assert j["share"] == round(25 / 60, 4)  # the 18 s before the crash had no checkpoint: lost
    assert j["faults"][0]["kind"] == "crash" and j["faults"][0]["cost"] == {"lost": 18.0, "restart": 7.0}


def test_painting_gives_each_second_to_the_highest_claim_and_the_rest_to_other():
    spans = _paint([_Claim("trained", 1, 9), _Claim("checkpoint", 3, 4), _Claim("lost", 6, 12, fault=0),
                    _Claim("startup", -5, 1)], 0, 10, nodes=2)
    assert [(s.part, s.begin, s.end) for s in spans] == [
        ("startup", 0, 1), ("trained", 1, 3), ("checkpoint", 3, 4), ("trained", 4, 6), ("lost", 6, 10)]
    assert spans[-1].fault == 0 and all(s.nodes == 2 for s in spans)
    assert [(s.part, s.begin, s.end) for s in _paint([], 0, 5, 1)] == [("other", 0, 5)]


# ---- what status, its JSON and runs show (a recorded history: crash, hang, preemption) ----

def test_status_shows_the_share_where_the_rest_went_and_each_fault_with_its_cost(tmp_path, fake_slurm):
    from click.testing import CliRunner

    from slurmtrain.cli import main
    from runs_fakes import recorded_run

    run, _ = recorded_run(tmp_path, "crash_hang_preempted")
    fake_slurm(scontrol="", sacct=None)  # Slurm forgot the job: everything from events.jsonl
    out = CliRunner().invoke(main, ["status", "--runs-dir", str(tmp_path), run.name]).output
    rows = [line for line in out.splitlines() if line.startswith(("goodput", "faults", " " * 11))]
    assert rows[0] == ("goodput    51% of 8m 46s of node time trained steps that were kept; start-up 8%, "
                       "checkpoints 3%, lost steps 10%, hangs 15%, restarts 13%, other 1%; queue 2m 18s")
    assert rows[1].startswith("faults     ") and rows[1].endswith(
        "crash (in the job): the program failed (exit status 1); cost 40 s of node time (lost steps 10 s, "
        "restarts 30 s)")
    assert rows[2].endswith("hang (in the job): no progress for 40 s; the last to report: rank(s) 1 on stnode2; "
                            "cost 2m 40s of node time (lost steps 40 s, hangs 1m 20s, restarts 40 s)")
    assert rows[3].endswith("preempted (ended the start): stopped after a checkpoint; requeued; cost 24 s of "
                            "node time (other 4 s, start-up 20 s) + 2m 08s in the queue")

    import json
    j = json.loads(CliRunner().invoke(main, ["status", "--runs-dir", str(tmp_path), "--json", run.name]).output)
    g = j["goodput"]
    assert (g["allocated_node_s"], g["node_s"]["trained"], g["queue_s"]) == (526, 266, 138)
    assert g["share"] == round(266 / 526, 4)
    assert [f["kind"] for f in g["faults"]] == ["crash", "hang", "preempted"]

    listing = CliRunner().invoke(main, ["runs", "--runs-dir", str(tmp_path)]).output.splitlines()
    assert listing[0].split()[7] == "GOODPUT" and listing[1].split()[6] == "51%"  # "JOB ID" is two words


def test_a_lost_node_replaced_by_a_spare_costs_its_restart_and_the_spare_idled_until_then():
    evs = [ev(0, "started", nodes="a b c", spares="c", job_id="7", restart=0), ev(10, "first_step", step=1),
           ev(30, "checkpoint_saved", step=10, seconds=1),
           ev(50, "nodes_lost", nodes="b", spares="c", left=0),
           ev(50, "relaunched", attempt=1, exit_code=137, last_progress=48),
           ev(60, "first_step", step=11), ev(100, "finished", step=40), ev(100, "finished", exit_code=0)]
    g = goodput.of_events(evs)
    [lost] = g.faults
    assert (lost.kind, lost.detail, lost.in_job) == ("node lost", "node(s) b lost; in their place: c", True)
    assert parts(g) == {"startup": 20, "trained": 2 * (19 + 40), "checkpoint": 2, "lost": 36, "restart": 24,
                        "spare": 50}
    assert g.allocated == 2 * 100 + 50  # the run's two nodes throughout, the spare until it took b's place


def test_status_names_the_stragglers_the_supervisor_saw(tmp_path, fake_slurm):
    from click.testing import CliRunner

    from slurmtrain import events
    from slurmtrain.cli import main
    from runs_fakes import recorded_run

    run, _ = recorded_run(tmp_path, "crash_hang_preempted")
    events.append(run.path, "straggler", job_id="140", restart=1, node="stnode2", compute_ms=9.1, others_ms=5.0,
                  pct=82)
    fake_slurm(scontrol="", sacct=None)
    out = CliRunner().invoke(main, ["status", "--runs-dir", str(tmp_path), run.name]).output
    [line] = [l for l in out.splitlines() if l.startswith("stragglers")]
    assert line.startswith("stragglers stnode2: 82% slower than the other nodes (9.1 ms against 5.0 ms for the "
                           "same work), since ")
    assert "straggler: stnode2 computes 82% slower than the other nodes (9.1 ms against 5.0 ms)" in out  # history


def test_status_says_the_checkpoint_interval_chosen_and_why(tmp_path, fake_slurm):
    from click.testing import CliRunner

    from slurmtrain import events
    from slurmtrain.cli import main
    from runs_fakes import recorded_run

    run, _ = recorded_run(tmp_path, "crash_hang_preempted")
    events.append(run.path, "checkpoint_interval", steps=120, seconds=250.0, cost_s=2.1, step_s=2.08, job_mtbf_h=4.13,
                  nodes=2, faults=1, node_hours=0.15)
    # The copies in node memory's own choice, later: the durable one stays in its row.
    events.append(run.path, "checkpoint_interval", steps=12, seconds=25.0, cost_s=0.02, step_s=2.08, job_mtbf_h=4.13,
                  nodes=2, faults=1, node_hours=0.15, tier="memory")
    fake_slurm(scontrol="", sacct=None)
    out = CliRunner().invoke(main, ["status", "--runs-dir", str(tmp_path), run.name]).output
    [line] = [l for l in out.splitlines() if l.startswith("ckpt")]
    assert line == ("ckpt       every 120 steps (~4.2 min): sqrt(2 x 2.1 s per checkpoint x 4.1 h between faults of "
                    "2 node(s); 1 fault(s) seen in 0.1 node-hours)")
    [line] = [l for l in out.splitlines() if l.startswith("memory")]
    assert line == ("memory     every 12 steps (~0.4 min): sqrt(2 x 0.02 s per copy in node memory x 4.1 h between "
                    "faults of 2 node(s); 1 fault(s) seen in 0.1 node-hours)")
    assert "copies in node memory every 12 steps from now" in out, out


def test_an_event_without_a_time_is_left_out_not_a_traceback():
    evs = [ev(0, "started", nodes="a", job_id="7", restart=0), {"event": "checkpoint_saved", "step": 3},
           {"event": "first_step", "time": "soon"}, ev(10, "finished", step=5), ev(10, "finished", exit_code=0)]
    assert goodput.of_events(evs).allocated == 10


@pytest.mark.parametrize("fields, kind", [({"signal": "TERM", "cause": "time limit"}, "time limit"),
                                          ({"signal": "USR2", "cause": "time limit"}, "time limit"),
                                          ({"signal": "USR2"}, "time limit"),   # written before `cause`
                                          ({"signal": "TERM"}, "preempted")])   # written before `cause`
def test_a_stop_signal_reads_the_same_in_goodput_and_in_the_outcome(fields, kind):
    """One reading of a `signal` event (eventlog.signal_cause): goodput named a TERM the time
    limit while the outcome named it a preemption."""
    from slurmtrain import eventlog
    evs = [ev(0, "submitted", job_id="7"), ev(10, "started", nodes="a", job_id="7", restart=0),
           ev(20, "first_step", step=1), ev(40, "signal", job_id="7", restart=0, **fields),
           ev(45, "stopped", step=10), ev(46, "requeue", job_id="7", restart=0, exit_code=75)]
    [fault] = goodput.of_events(evs, now=50).faults
    [start] = [s for s in eventlog.split(evs) if s.started is not None]
    assert fault.kind == eventlog.outcome(start).kind == kind


@pytest.mark.parametrize("cause, seen, detail", [
    ("node lost", {"seen_as": "hang"}, "node(s) b lost, no spare left; seen first as a hang (no progress for 20 s)"),
    ("hang", {}, "no progress for 20 s; node(s) b left out, no spare left"),
])
def test_nodes_left_out_with_no_spare_end_the_start_as_the_fault_the_supervisor_named(cause, seen, detail):
    evs = [ev(0, "started", nodes="a b", job_id="7", restart=0), ev(10, "first_step", step=1),
           ev(50, "hang", seconds=20, ranks="1", nodes="b", step=9, stacks="s"),
           ev(55, "nodes_lost", nodes="b", spares="none", left=0, cause=cause, **seen),
           ev(56, "requeue", reason="node", exclude="b", cause=cause, **seen)]
    [fault] = goodput.of_events(evs, now=60).faults
    assert (fault.kind, fault.detail, fault.in_job) == (cause, detail + "; requeued", False)


def test_a_run_without_a_heartbeat_yet_is_not_said_to_send_none():
    from slurmtrain.cli.runs import _goodput_rows
    evs = [ev(0, "started", nodes="a", job_id="7", restart=0)]
    report = goodput.of_events(evs, now=30).to_json()
    assert not report["progress_known"]
    [(_, running)] = _goodput_rows(report, ended=False)
    assert running.endswith("(no heartbeat yet: until the first, start-up counts as trained)"), running
    [(_, ended)] = _goodput_rows(report, ended=True)
    assert ended.endswith("(no heartbeat came: the program sends none, or ended before its first step; start-up and "
                          "lost steps count as trained)"), ended
    from slurmtrain.cli.runs import _share
    assert (_share(report, active=True), _share(report)) == ("-", "100%")  # `runs`: not known while it runs
    # Lost steps known from its checkpoints (a crash after a save): not said to count as trained.
    crashed = [*evs, ev(20, "checkpoint_saved", step=5, seconds=1), ev(40, "relaunched", attempt=1, exit_code=1),
               ev(50, "finished", exit_code=0)]
    [(_, said), *_] = _goodput_rows(goodput.of_events(crashed, now=60).to_json(), ended=True)
    assert "lost steps" in said and said.endswith(
        "(no heartbeat came: the program sends none, or ended before its first step; start-up counts as trained)"), said


def test_a_cancel_of_a_job_pending_again_after_a_requeue_holds_no_nodes():
    """Requeued from outside at 50 (the job waits in the queue again), cancelled at 62: the
    start's node time ends with the job's own last word, not the cancel command's."""
    evs = [ev(0, "submitted", job_id="7"), ev(10, "started", job_id="7", restart=0, nodes="a b"),
           ev(20, "first_step", step=1, at=19), ev(45, "checkpoint_saved", step=10, seconds=2),
           ev(48, "stopped", step=10), ev(50, "requeued_by_slurm", job_id="7", restart=0, by="scontrol requeue"),
           ev(62, "cancel_requested", job_id="7")]
    g = goodput.of_events(evs, now=100)
    assert g.allocated == 2 * (50 - 10), parts(g)


def test_status_warns_of_a_launch_that_did_not_resume_from_the_newest_checkpoint(tmp_path, fake_slurm):
    from click.testing import CliRunner

    from slurmtrain import events
    from slurmtrain.cli import main
    from runs_fakes import recorded_run

    run, _ = recorded_run(tmp_path, "crash_hang_preempted")
    events.append(run.path, "resumed_behind", job_id="140", restart=1, step=1, saved=40, path="/ck/version_140")
    fake_slurm(scontrol="", sacct=None)
    out = CliRunner().invoke(main, ["status", "--runs-dir", str(tmp_path), run.name]).output
    [line] = [l for l in out.splitlines() if l.startswith("warning")]
    assert "began at step 1, below the checkpoint of step 40 (/ck/version_140) the run had saved" in line, out
    assert "the program did not resume from its newest checkpoint: its first step is 1, but the run had saved " \
           "step 40" in out  # history


def test_steps_trained_again_by_a_launch_that_did_not_resume_are_lost():
    """Saved step 40 in the first start; the second began at step 1 again (resumed_behind) and
    reached step 40 at its pace (0.5 s a step): those 20 s are lost, charged to a fault of
    their own, not trained."""
    evs = [ev(0, "started", nodes="a", job_id="7", restart=0), ev(10, "first_step", step=1),
           ev(30, "checkpoint_saved", step=40), ev(30, "stopped", step=40), ev(31, "requeue", exit_code=75),
           ev(40, "started", nodes="a", job_id="7", restart=1), ev(50, "first_step", step=1),
           ev(50.5, "resumed_behind", step=1, saved=40), ev(80, "checkpoint_saved", step=60),
           ev(90, "finished", step=80), ev(90, "finished", exit_code=0)]
    g = goodput.of_events(evs)
    again = [i for i, f in enumerate(g.faults) if f.kind == "trained again"]
    assert len(again) == 1 and g.faults[again[0]].in_job, g.faults
    assert g.cost(again[0]) == {"lost": pytest.approx(50 + (40 - 1) / (60 - 1) * 30 - 50)}
    assert parts(g)["trained"] == pytest.approx(20 + 40 - g.cost(again[0])["lost"], abs=0.01)


def test_a_launch_still_short_of_the_checkpoint_is_lost_at_its_pace_not_to_its_end():
    """Running, at step 21 of 40 by its last report: the steps to 40 are placed at that pace
    (0.5 s a step), not all its time counted lost."""
    evs = [ev(0, "started", nodes="a", job_id="7", restart=0), ev(10, "first_step", step=1),
           ev(30, "checkpoint_saved", step=40), ev(30, "stopped", step=40), ev(31, "requeue", exit_code=75),
           ev(40, "started", nodes="a", job_id="7", restart=1), ev(50, "first_step", step=1),
           ev(50.5, "resumed_behind", step=1, saved=40), ev(60, "checkpoint_saved", step=21)]
    g = goodput.of_events(evs, now=100)
    [again] = [i for i, f in enumerate(g.faults) if f.kind == "trained again"]
    assert g.cost(again) == {"lost": pytest.approx((40 - 1) * 0.5)}


def test_a_run_that_trained_nothing_is_not_said_to_count_its_start_up_as_trained():
    """Failed at import, before any heartbeat: 0% trained, so the note says no more than why
    there is no heartbeat (it said "start-up counts as trained" beside 0%)."""
    from slurmtrain.cli.runs import _goodput_rows
    evs = [ev(0, "started", nodes="a", job_id="7", restart=0), ev(2, "failed", exit_code=1, error="ImportError: x")]
    [(_, said), *_] = _goodput_rows(goodput.of_events(evs, now=10).to_json(), ended=True)
    assert said.endswith("(no heartbeat came: the program sends none, or ended before its first step)"), said
