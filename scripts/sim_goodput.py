"""Goodput at scale, by simulation: the share of a training job's GPU time that trains steps it
keeps, at 64, 1,024 and 16,384 GPUs, when faults are recovered inside the allocation ("in-job",
with spare nodes) or only by ending the job and queueing again ("requeue-only").

Faults are a Poisson process over the working nodes (node MTBF from a published figure),
replayed event by event, seeded; both policies checkpoint at the Young-Daly interval. Goodput =
kept node time / (allocated node time, spares included, + node time back in the queue after a
requeue: the run waits, though it holds no GPU; the table's last goodput column leaves it out).

    python scripts/sim_goodput.py [--mtbf-source llama3|meta] [--seed 0] [--json] [--costs-json FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from dataclasses import asdict, dataclass, field, fields, replace

GPUS_PER_NODE = 8
SCALES = (64, 1024, 16384)
POLICIES = ("in-job", "requeue-only")
HOUR, DAY = 3600.0, 86400.0
# One node's MTBF (hours) from each published figure: a job of n nodes fails n times as often.
MTBF_SOURCES = {
    "llama3": (54 * 24 * 2048 / 419, "Llama 3 405B (Meta, 2024): 419 unexpected interruptions in "
               "54 days on 16,384 GPUs (2,048 nodes) => node MTBF 54*24 h * 2048 / 419"),
    "meta": (7.9 * 128, "Meta research clusters (Kokolis et al., 2024): mean time to failure "
             "7.9 h for 1,024-GPU (128-node) jobs => node MTBF 7.9 h * 128"),
}


def _f(default, help: str):
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class Costs:
    """Every assumption, each printed with its help: ``--costs-json FILE`` (a later script's
    measured values) or ``--field-name`` overrides any of them."""
    node_mtbf_h: float = _f(MTBF_SOURCES["llama3"][0], "one node's mean time between failures, hours")
    checkpoint_s: float = _f(60.0, "training stalls this long per durable checkpoint save")
    load_s: float = _f(120.0, "reading the newest checkpoint back, on every restart")
    restart_s: float = _f(180.0, "in-job relaunch: processes, imports, rendezvous, NCCL init")
    cold_start_s: float = _f(600.0, "new allocation: prolog/health checks, container/env, init")
    queue_wait_s: float = _f(1800.0, "back in the queue after a requeue (Slurm alone holds 120 s)")
    hang_timeout_s: float = _f(600.0, "a hang is seen after this (slurmtrain's floor; NCCL's default)")
    hardware_share: float = _f(0.78, "faults that are hardware (Llama 3: 78% of interruptions)")
    replace_share: float = _f(0.75, "of hardware faults, those that need the node out (Llama 3: "
                              "GPU faults 58.7% of all = 75% of 78%); the rest restart in place")
    hang_share: float = _f(0.15, "faults seen only through the hang timeout (assumed; others at once)")
    spare_share: float = _f(1 / 64, "in-job: spare nodes per working node, rounded down")
    min_spares: int = _f(0, "in-job: spare nodes at least (requeue-only holds none)")
    restarts_in_job: int = _f(0, "in-job restarts per job start before it requeues; 0: no limit")
    interval_s: float | None = _f(None, "checkpoint interval, s; null: Young-Daly, sqrt(2*checkpoint_s*job MTBF)")
    memory_stall_s: float | None = _f(None, "training stalls this long per copy in node memory (train.memory_steps);"
                                      " null: no memory tier")
    memory_load_s: float = _f(15.0, "in-job restart with the memory tier: loading the copy in node memory "
                              "(own, or the peer's for a lost node)")
    memory_interval_s: float | None = _f(None, "interval of the copies in node memory, s; null: Young-Daly on "
                                         "memory_stall_s (the durable saves stay at interval_s)")
    days: float = _f(30.0, "wall-clock days per simulated run")
    runs: int = _f(1000, "runs per scale and policy (the figures are their totals)")


POSITIVE = {"node_mtbf_h", "checkpoint_s", "interval_s", "memory_interval_s", "days", "runs"}
SHARES = {"hardware_share", "replace_share", "hang_share", "spare_share"}
MAY_BE_INFINITE = {"node_mtbf_h", "interval_s", "memory_interval_s"}  # no faults; never checkpoint
NULLABLE = {"interval_s", "memory_stall_s", "memory_interval_s"}
TYPES = {f.name: f.type for f in fields(Costs)}


def check(name: str, value) -> str | None:
    """What is wrong with one field's value, or None."""
    if value is None and name in NULLABLE:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"must be a number, not {value!r}"
    if not (math.isfinite(value) or (name in MAY_BE_INFINITE and value > 0)):
        return f"must be finite, not {value!r}"
    if TYPES[name] == "int" and value != int(value):
        return f"must be a whole number, not {value!r}"
    if name in POSITIVE and not value > 0:
        return f"must be > 0, not {value!r}"
    if name in SHARES and not 0 <= value <= 1:
        return f"must be between 0 and 1, not {value!r}"
    if not value >= 0:
        return f"must be >= 0, not {value!r}"
    return None


def override(costs: Costs, values: dict, label) -> Costs:
    """Costs with ``values`` in place; SystemExit(2) naming ``label(key)`` on a bad key or value."""
    for key, value in values.items():
        if key not in TYPES:
            fail(f"{label(key)}: unknown key (known: {', '.join(TYPES)})")
        problem = check(key, value)
        if problem:
            fail(f"{label(key)} {problem}")
    return replace(costs, **{k: int(v) if TYPES[k] == "int" else v for k, v in values.items()})


def fail(message: str):
    print(f"sim_goodput.py: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def young_daly(checkpoint_s: float, job_mtbf_s: float) -> float:
    """The checkpoint interval that minimises stall plus expected rework (Young 1974, Daly 2006)."""
    return math.sqrt(2 * checkpoint_s * job_mtbf_s)


def spares(nodes: int, costs: Costs) -> int:
    return max(costs.min_spares, math.floor(nodes * costs.spare_share))


def interval(nodes: int, costs: Costs) -> float:
    return costs.interval_s or young_daly(costs.checkpoint_s, costs.node_mtbf_h * HOUR / nodes)


@dataclass(frozen=True)
class Cadence:
    """Copies in node memory every ``tau`` of training, each stalling ``stall``; every
    ``k``-th copy is the durable save instead, stalling ``durable_stall``. No memory tier:
    k = 1, every copy durable."""
    tau: float
    stall: float
    durable_stall: float
    k: int

    @classmethod
    def of(cls, nodes: int, costs: Costs) -> "Cadence":
        durable = interval(nodes, costs)
        if costs.memory_stall_s is None or not math.isfinite(durable):
            return cls(durable, costs.checkpoint_s, costs.checkpoint_s, 1)
        tau = costs.memory_interval_s or young_daly(max(costs.memory_stall_s, 1e-3), costs.node_mtbf_h * HOUR / nodes)
        k = max(1, round(durable / tau)) if tau < durable else 1
        return cls(durable / k, costs.memory_stall_s, costs.checkpoint_s, k)

    def train(self, work: float, phase: int) -> tuple[float, int, float]:
        """``work`` seconds of a start, ``phase`` copies in memory since the last durable save:
        (training made durable by the saves in it, the earlier copies' included; the copies in
        memory after it; the training after the last copy or save, for a planned end)."""
        if not math.isfinite(self.tau):
            return 0.0, 0, work
        step = self.tau + self.stall
        to_durable = (self.k - phase) * self.tau + (self.k - phase - 1) * self.stall + self.durable_stall
        if work < to_durable:
            done = min(self.k - phase - 1, math.floor(work / step))
            return 0.0, phase + done, min(work - done * step, self.tau)
        group = self.k * self.tau + (self.k - 1) * self.stall + self.durable_stall
        groups = math.floor((work - to_durable) / group)
        rest = work - to_durable - groups * group
        done = min(self.k - 1, math.floor(rest / step))
        return (1 + groups) * self.k * self.tau, done, min(rest - done * step, self.tau)


@dataclass
class Result:
    kept: float = 0.0      # node-seconds of training whose steps were kept
    held: float = 0.0      # node-seconds allocated, spares included
    queued: float = 0.0    # node-seconds of wall-clock time spent back in the queue
    faults: int = 0
    requeues: int = 0

    def add(self, other: Result) -> None:
        for k, v in asdict(other).items():
            setattr(self, k, getattr(self, k) + v)

    def goodput(self) -> float:
        return self.kept / (self.held + self.queued)

    def goodput_allocated(self) -> float:
        return self.kept / self.held


def simulate(policy: str, gpus: int, costs: Costs, rng: random.Random) -> Result:
    """One run of ``costs.days``: the clock starts at the first step (the first start-up is
    the same under both policies). Between faults the job recovers for ``recovery`` seconds,
    then trains in cycles of interval + checkpoint stall; what a fault interrupts is lost."""
    nodes = gpus // GPUS_PER_NODE
    pool = spares(nodes, costs) if policy == "in-job" else 0
    cadence = Cadence.of(nodes, costs) if policy == "in-job" else Cadence.of(nodes, replace(costs, memory_stall_s=None))
    memory = cadence.k > 1                       # in-job restarts resume from the copies in node memory
    rate = nodes / (costs.node_mtbf_h * HOUR)    # spares idle: their faults go unseen
    end, t, recovery = costs.days * DAY, 0.0, 0.0
    left, restarts, phase, r = pool, 0, 0, Result()
    while t < end:
        fault = t + (rng.expovariate(rate) if rate > 0 else math.inf)
        busy = min(fault, end) - t
        work = max(0.0, busy - recovery)
        durable, phase, since = cadence.train(work, phase)
        r.kept += nodes * durable
        r.held += (nodes + pool) * busy
        if fault >= end:                          # a run's planned end saves what it trained
            r.kept += nodes * (phase * cadence.tau + since)
            break
        t, r.faults = fault, r.faults + 1
        detect = costs.hang_timeout_s if rng.random() < costs.hang_share else 0.0
        needs_node = rng.random() < costs.hardware_share * costs.replace_share
        limit = costs.restarts_in_job
        if policy == "in-job" and (left or not needs_node) and (not limit or restarts < limit):
            left, restarts = left - needs_node, restarts + 1
            recovery = detect + costs.restart_s + (costs.memory_load_s if memory else costs.load_s)
            continue
        # The job ends once the fault is seen; a new allocation (fresh spares) after the queue.
        r.requeues += 1
        r.held += (nodes + pool) * detect
        wait = min(costs.queue_wait_s, max(0.0, end - t - detect))
        r.queued += (nodes + pool) * wait
        t += detect + wait
        left, restarts, phase, recovery = pool, 0, 0, costs.cold_start_s + costs.load_s  # memory copies lost
    return r


def replay(policy: str, gpus: int, costs: Costs, seed: int) -> Result:
    # The same seed for both policies: they meet the same fault draws (common random numbers).
    rng, total = random.Random(f"{seed}:{gpus}"), Result()
    for _ in range(costs.runs):
        total.add(simulate(policy, gpus, costs, rng))
    return total


def table(costs: Costs, seed: int) -> list[dict]:
    rows = []
    for gpus in SCALES:
        nodes = gpus // GPUS_PER_NODE
        inj, req = (replay(p, gpus, costs, seed) for p in POLICIES)
        rows.append({"gpus": gpus, "nodes": nodes, "spares_in_job": spares(nodes, costs),
                     "job_mtbf_h": costs.node_mtbf_h / nodes,
                     "checkpoint_interval_min": interval(nodes, costs) / 60,
                     "goodput_in_job": inj.goodput(), "goodput_requeue_only": req.goodput(),
                     "goodput_in_job_allocated": inj.goodput_allocated(),
                     "goodput_requeue_only_allocated": req.goodput_allocated(),
                     "faults_in_job": inj.faults, "faults_requeue_only": req.faults,
                     "requeues_in_job": inj.requeues})
    return rows


def assumptions(costs: Costs) -> list[str]:
    lines = [f"fault rate ({'used' if mtbf == costs.node_mtbf_h else 'not used'}): {text} = {mtbf:,.1f} h"
             for mtbf, text in MTBF_SOURCES.values()]
    lines += [f"faults: Poisson over the working nodes, {GPUS_PER_NODE} GPUs a node; node MTBF used: "
              f"{costs.node_mtbf_h:,.1f} h; job MTBF = node MTBF / nodes",
              "in-job: a fault costs its detection (a hang: hang_timeout_s; a crash: 0) + restart_s + "
              "load_s + the steps since the last checkpoint (with a memory tier: memory_load_s, and the "
              "steps since the last copy in node memory, where that is the newer); one that needs a node "
              "takes a spare, and with none left the job requeues as below (a new allocation brings new "
              "spares; the copies in node memory are lost)",
              "requeue-only: every fault ends the job: detection + queue_wait_s + cold_start_s + load_s "
              "+ the steps since the last checkpoint",
              "goodput: kept node time / (allocated node time, idle spares included, + node time "
              "back in the queue); checkpoint stalls are lost time; the clock starts at the first step"]
    shown = {k: "null" if v is None else f"{v:g}" for k, v in asdict(costs).items()}
    lines += [f"{f.name} = {shown[f.name]}: {f.metadata['help']}" for f in fields(Costs)
              if f.name != "node_mtbf_h"]
    return lines


def render(rows: list[dict]) -> str:
    out = ["| GPUs | nodes (+ spares, in-job) | job MTBF | checkpoint interval | goodput in-job "
           "| goodput requeue-only | requeue-only, queue left out | faults simulated (in-job / requeue) |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['gpus']:,} | {r['nodes']:,} + {r['spares_in_job']} | {r['job_mtbf_h']:,.1f} h "
                   f"| {r['checkpoint_interval_min']:,.1f} min | {r['goodput_in_job']:.4f} "
                   f"| {r['goodput_requeue_only']:.4f} | {r['goodput_requeue_only_allocated']:.4f} "
                   f"| {r['faults_in_job']:,} / {r['faults_requeue_only']:,} |")
    return "\n".join(out)


class Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, no usage block
        fail(message)


def costs_from_args(argv: list[str] | None) -> tuple[Costs, argparse.Namespace]:
    ap = Parser(description=__doc__.splitlines()[0])
    ap.add_argument("--mtbf-source", choices=sorted(MTBF_SOURCES), default="llama3")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="print the assumptions and rows as JSON")
    ap.add_argument("--costs-json", metavar="FILE", help="a JSON object overriding Costs fields")
    for f in fields(Costs):
        ap.add_argument("--" + f.name.replace("_", "-"), type=int if f.type == "int" else float,
                        default=None, help=f.metadata["help"].replace("%", "%%"))  # argparse formats help with %
    args = ap.parse_args(argv)
    costs = Costs(node_mtbf_h=MTBF_SOURCES[args.mtbf_source][0])
    if args.costs_json:
        try:
            with open(args.costs_json, encoding="utf-8") as fh:
                given = json.load(fh)
        except (OSError, ValueError) as e:
            fail(f"--costs-json {args.costs_json}: {e}")
        if not isinstance(given, dict):
            fail(f"--costs-json {args.costs_json}: must hold a JSON object")
        costs = override(costs, given, lambda k: f"--costs-json {args.costs_json}: key {k!r}")
    flags = {f.name: getattr(args, f.name) for f in fields(Costs) if getattr(args, f.name) is not None}
    return override(costs, flags, lambda k: "--" + k.replace("_", "-")), args


def main(argv: list[str] | None = None) -> int:
    costs, args = costs_from_args(argv)
    rows = table(costs, args.seed)
    if args.json:
        print(json.dumps({"mtbf_source": args.mtbf_source, "seed": args.seed,
                          "node_mtbf_h": {k: v[0] for k, v in MTBF_SOURCES.items()},
                          "costs": asdict(costs), "assumptions": assumptions(costs),
                          "rows": rows}, indent=2))
        return 0
    print(f"Goodput by simulation (seed {args.seed}, {costs.runs} runs of {costs.days:g} days "
          f"per scale and policy)")
    print("\n".join("assumption: " + line for line in assumptions(costs)))
    print(render(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
