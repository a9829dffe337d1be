"""scripts/sim_goodput.py: the fault simulation's properties, and its command line (fast, no Slurm)."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "sim_goodput.py"
_spec = importlib.util.spec_from_file_location("sim_goodput", SCRIPT)
sim = importlib.util.module_from_spec(_spec)
sys.modules["sim_goodput"] = sim  # dataclasses resolve the module's annotations through it
_spec.loader.exec_module(sim)

FEW = sim.Costs(runs=40)  # the defaults, fewer runs: each test stays well under a second


def goodputs(costs: sim.Costs, seed: int = 0) -> dict[int, tuple[float, float]]:
    return {g: tuple(sim.replay(p, g, costs, seed).goodput() for p in sim.POLICIES) for g in sim.SCALES}


def test_published_rates_give_the_node_mtbfs():
    assert sim.MTBF_SOURCES["llama3"][0] == pytest.approx(54 * 24 * 2048 / 419)  # 6,334.6 h
    assert sim.MTBF_SOURCES["meta"][0] == pytest.approx(7.9 * 128)
    assert sim.Costs().node_mtbf_h == sim.MTBF_SOURCES["llama3"][0]


def test_young_daly_interval():
    assert sim.young_daly(60, 10_000) == pytest.approx(math.sqrt(2 * 60 * 10_000))
    # job MTBF = node MTBF / nodes: 16 times the nodes, a quarter of the interval
    assert sim.interval(2048, FEW) == pytest.approx(sim.interval(128, FEW) / 4)
    assert sim.interval(128, FEW) == pytest.approx(math.sqrt(2 * 60 * FEW.node_mtbf_h * 3600 / 128))
    assert sim.interval(128, dataclasses.replace(FEW, interval_s=900)) == 900


def test_without_faults_goodput_is_one_less_the_checkpoint_stall():
    calm = sim.Costs(node_mtbf_h=math.inf, interval_s=3600, checkpoint_s=60, runs=2)
    stall_share = 60 / 3660
    for gpus in sim.SCALES:
        nodes = gpus // 8
        inj, req = (sim.replay(p, gpus, calm, 0) for p in sim.POLICIES)
        assert inj.faults == req.faults == 0 and req.queued == 0
        assert req.goodput() == pytest.approx(1 - stall_share, rel=1e-4)
        # the spares are allocated and idle: their time is in the denominator
        share = nodes / (nodes + sim.spares(nodes, calm))
        assert inj.goodput() == pytest.approx((1 - stall_share) * share, rel=1e-4)


def test_requeue_only_matches_renewal_reward():
    """Between requeues, faults renew the process: goodput = E[kept] / E[wall] per fault, with
    E[kept] = tau * E[full cycles after the recovery R] = tau * exp(-lam R) * q / (1 - q),
    q = exp(-lam (tau + c)), and E[wall] = 1/lam + detection + queue wait."""
    c = dataclasses.replace(FEW, node_mtbf_h=sim.MTBF_SOURCES["meta"][0], runs=30)
    nodes, lam = 2048, 2048 / (c.node_mtbf_h * 3600)
    tau, recovery = sim.interval(nodes, c), c.cold_start_s + c.load_s
    q = math.exp(-lam * (tau + c.checkpoint_s))
    kept = tau * math.exp(-lam * recovery) * q / (1 - q)
    wall = 1 / lam + c.hang_share * c.hang_timeout_s + c.queue_wait_s
    assert sim.replay("requeue-only", 16384, c, 0).goodput() == pytest.approx(kept / wall, rel=0.02)


def test_goodput_falls_as_gpus_rise():
    for source in ("llama3", "meta"):
        g = goodputs(dataclasses.replace(FEW, node_mtbf_h=sim.MTBF_SOURCES[source][0]))
        for small, big in zip(sim.SCALES, sim.SCALES[1:]):
            assert g[big][0] < g[small][0] and g[big][1] < g[small][1], (source, g)


def test_in_job_restart_is_never_worse_than_requeue():
    # Without spares, in-job differs only in restarting in place the faults that need no new
    # node: 300 s instead of 2,520 s each. At 64 GPUs (a fault every ~33 days) that is within
    # the noise of 40 runs (differences of -0.0003 to +0.0006 over 40 seeds).
    g = goodputs(dataclasses.replace(FEW, spare_share=0.0))
    assert g[64][0] >= g[64][1] - 0.001, g
    assert g[1024][0] > g[1024][1] + 0.002 and g[16384][0] > g[16384][1] + 0.03, g
    # The default spares pay for their idle time at 16,384 GPUs by a wide margin.
    inj, req = goodputs(FEW)[16384]
    assert inj > req + 0.05


def test_spares_idle_time_is_charged():
    # 1 spare for 8 nodes: an eighth more allocation, for faults every ~33 days: a loss.
    inj, req = goodputs(dataclasses.replace(FEW, min_spares=1))[64]
    assert inj < req - 0.08


def test_in_job_falls_back_to_requeue_when_spares_run_out():
    none = sim.replay("in-job", 16384, dataclasses.replace(FEW, spare_share=0.0, runs=5), 0)
    plenty = sim.replay("in-job", 16384, dataclasses.replace(FEW, spare_share=0.5, runs=5), 0)
    every = sim.replay("requeue-only", 16384, dataclasses.replace(FEW, runs=5), 0)
    assert every.requeues == every.faults
    assert 0.4 < none.requeues / none.faults < 0.8   # the node-replacing share, 0.78 * 0.75
    assert plenty.requeues == 0


def test_same_seed_same_figures():
    a = sim.replay("in-job", 1024, FEW, 7)
    assert a == sim.replay("in-job", 1024, FEW, 7)
    assert a != sim.replay("in-job", 1024, FEW, 8)


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60)


def test_prints_assumptions_then_the_table():
    proc = run("--runs", "5")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    table = [ln for ln in lines if ln.startswith("|")]
    assert len(table) == 2 + len(sim.SCALES) and "goodput in-job" in table[0]
    assert lines.index(table[0]) > max(i for i, ln in enumerate(lines) if ln.startswith("assumption: "))
    assert "6,334.6 h" in proc.stdout and "1,011.2 h" in proc.stdout   # both derived node MTBFs
    assert "| 16,384 | 2,048 + 32 | 3.1 h | 19.3 min |" in proc.stdout
    for f in dataclasses.fields(sim.Costs):
        assert f.name in proc.stdout or f.name == "node_mtbf_h"


@pytest.mark.parametrize("args, named", [
    (["--checkpoint-s", "-5"], "--checkpoint-s must be > 0"),
    (["--runs", "0"], "--runs must be > 0"),
    (["--hang-share", "1.5"], "--hang-share must be between 0 and 1"),
    (["--queue-wait-s", "nan"], "--queue-wait-s must be finite"),
    (["--mtbf-source", "google"], "--mtbf-source"),
])
def test_bad_option_exits_2_with_one_line(args, named, capsys):
    with pytest.raises(SystemExit) as e:
        sim.main(args)
    err = capsys.readouterr().err
    assert e.value.code == 2 and named in err and err.count("\n") == 1


@pytest.mark.parametrize("given, named", [
    ({"queue_wait_s": 60, "queue_wiat_s": 1}, "key 'queue_wiat_s': unknown key"),
    ({"restart_s": -1}, "key 'restart_s' must be >= 0"),
    ({"runs": 2.5}, "key 'runs' must be a whole number"),
    ({"load_s": "2 min"}, "key 'load_s' must be a number"),
])
def test_bad_costs_json_exits_2_naming_the_key(tmp_path, given, named):
    path = tmp_path / "costs.json"
    path.write_text(json.dumps(given))
    proc = run("--costs-json", str(path))
    assert proc.returncode == 2 and proc.stdout == ""
    assert named in proc.stderr and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def test_costs_json_overrides_and_flags_override_it(tmp_path, capsys):
    path = tmp_path / "measured.json"
    path.write_text(json.dumps({"restart_s": 45.5, "queue_wait_s": 120, "runs": 3, "interval_s": None}))
    assert sim.main(["--costs-json", str(path), "--runs", "2", "--mtbf-source", "meta", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    costs = out["costs"]
    assert costs["restart_s"] == 45.5 and costs["queue_wait_s"] == 120 and costs["runs"] == 2
    assert costs["node_mtbf_h"] == pytest.approx(7.9 * 128) and costs["checkpoint_s"] == 60
    assert [r["gpus"] for r in out["rows"]] == list(sim.SCALES)
    assert {"job_mtbf_h", "checkpoint_interval_min", "goodput_in_job", "goodput_requeue_only",
            "faults_in_job", "faults_requeue_only"} <= set(out["rows"][0])
    assert any("restart_s = 45.5" in line for line in out["assumptions"])


def test_help_lists_every_cost_with_its_percent_signs():
    out = run("--help")
    assert out.returncode == 0, out.stderr
    assert "78%" in out.stdout and "--hardware-share" in out.stdout


def test_the_cadence_without_a_memory_tier_is_one_durable_save_a_cycle():
    cad = sim.Cadence.of(128, FEW)
    assert (cad.k, cad.tau, cad.stall) == (1, sim.interval(128, FEW), FEW.checkpoint_s)
    # 2.5 cycles of training: two saves made it durable, half a cycle is left for a planned end
    assert cad.train(2.5 * (cad.tau + cad.stall), 0) == pytest.approx((2 * cad.tau, 0, 0.5 * (cad.tau + cad.stall)))


def test_copies_in_node_memory_between_the_durable_saves():
    """k copies a durable interval: training is durable only at every k-th; the copies between
    carry across an in-job restart (the phase), and are lost at a requeue."""
    c = dataclasses.replace(FEW, interval_s=1000, checkpoint_s=10, memory_stall_s=1, memory_interval_s=250)
    cad = sim.Cadence.of(128, c)
    assert (cad.k, cad.tau, cad.stall, cad.durable_stall) == (4, 250, 1, 10)
    durable, phase, since = cad.train(2 * 251 + 100, 0)  # two copies, then 100 s
    assert (durable, phase, since) == (0, 2, pytest.approx(100))
    durable, phase, _ = cad.train(2 * 251 + 10 + 5, phase)  # the copy and the save: all four durable
    assert (durable, phase) == (1000, 0)


def test_the_memory_tier_raises_in_job_goodput_and_leaves_requeue_only_alone():
    slow = dataclasses.replace(FEW, checkpoint_s=60, load_s=120)
    tiered = dataclasses.replace(slow, memory_stall_s=2, memory_load_s=15)
    before, after = goodputs(slow), goodputs(tiered)
    assert after[16384][0] > before[16384][0] + 0.02
    assert all(after[g][1] == before[g][1] for g in sim.SCALES)  # requeue-only keeps no copies


GOODPUT_COSTS = SCRIPT.parent / "goodput_costs.py"


def test_goodput_costs_scales_the_measured_rates_to_the_model():
    proc = subprocess.run([sys.executable, str(GOODPUT_COSTS), "--params", "405e9", "--gpus", "16384"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    got = dict(line[3:].split(" = ") for line in proc.stdout.splitlines() if line.startswith("=> "))
    gpu_bytes = 405e9 * 12 / 16384
    save = json.loads((SCRIPT.parent / "measured" / "bench_save_gpu_h200.json").read_text())
    model = next(iter(save["models"].values()))
    d2h = model["checkpoint_mb"] * 2**20 / model["async"]["stall"]
    assert float(got["checkpoint_s"]) == pytest.approx(gpu_bytes / d2h, rel=1e-2)
    # a copy in node memory stalls for the device-to-host copy; the rest runs in its thread
    assert float(got["memory_stall_s"]) == float(got["checkpoint_s"])
    assert "a copy's call (host to host)" in proc.stdout
    from slurmtrain.job.hangs import HANG_FLOOR_S
    assert float(got["hang_timeout_s"]) == HANG_FLOOR_S


def test_goodput_costs_says_which_file_lacks_what(tmp_path):
    bad = tmp_path / "load.json"
    bad.write_text('{"checkpoint_mb": 1}')
    proc = subprocess.run([sys.executable, str(GOODPUT_COSTS), "--load", str(bad)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "load.json: no durable, memory, own, memory, peer, copy, the call" in proc.stderr, \
        proc.stderr
    assert "Traceback" not in proc.stderr
