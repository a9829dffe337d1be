"""From the nodes' results to rows (node, check, figure, verdict, detail), one table,
the JSON and the list of failures. Torch-free: the verdicts that compare nodes
(versions equal, matmul vs the median, clock skew) are decided here.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path

PASS, WARN, FAIL, SKIP = "pass", "warn", "fail", "skip"
SLOW_FRACTION = 0.9        # a node below this share of the median matmul figure is slow
CLOCK_WARN_S, CLOCK_FAIL_S = 0.5, 5.0
# Below this busbw (8 Mbit/s) no network carries training, whatever the profile expects;
# loopback gloo on a busy 2-core machine measures 0.1 GB/s and more, far above it.
FLOOR_BUSBW_GBPS = 0.001
SLURM_NODE = "(slurm)"     # the node column of rows about the partition, not a node


@dataclass(frozen=True)
class Row:
    node: str
    check: str
    figure: str
    verdict: str
    detail: str = ""


@dataclass(frozen=True)
class Expect:
    """What the profile says the nodes should show."""

    gpus_per_node: int = 0
    expected_busbw_gbps: float | None = None


def load_results(doctor_dir: Path) -> dict[str, dict]:
    """node -> its results file's content (``<run>/doctor/<node>.json``)."""
    out = {}
    for path in sorted(doctor_dir.glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # half written: the node did not finish
        out[data.get("node") or path.stem] = data
    return out


def rows(nodes: list[str], results: dict[str, dict], checks: tuple[str, ...], expect: Expect,
         arrived: set[str] | None = None, setup_failed: dict | None = None) -> list[Row]:
    """One row per node and check. ``arrived``: the nodes that ran their setup lines (the
    job's arrival marks); a node that did not fails ``setup`` (naming its failed setup
    line, from ``setup_failed``: node -> arrivals.SetupFailure), and the nodes the job's
    end then took down with it are not blamed (their checks are skipped)."""
    arrived = set(results) if arrived is None else arrived | set(results)
    setup_failed = setup_failed or {}
    out: list[Row] = []
    bad_setup = [n for n in nodes if n not in arrived]
    for node in nodes:
        if node in arrived:
            out.append(Row(node, "setup", "started", PASS))
        elif node in setup_failed:
            f = setup_failed[node]
            out.append(Row(node, "setup", f"setup line failed (exit {f.status})", FAIL,
                           f"{f.describe()} (see its log in the run directory's logs/)"))
        elif setup_failed:  # srun ended every task once one node's setup failed: not this node's doing
            out.append(Row(node, "setup", "not started", SKIP,
                           f"the job ended when {' '.join(sorted(setup_failed))}'s setup failed"))
        else:
            out.append(Row(node, "setup", "did not start", FAIL,
                           "the node did not get through its setup lines, container or launcher start "
                           "(see its log in the run directory's logs/)"))
    for node in nodes:
        if node in arrived and node not in results:
            out.append(Row(node, "checks", "no result", SKIP, "the job ended when another node failed to start")
                       if bad_setup else
                       Row(node, "checks", "no result", FAIL, "the node started but its checks wrote no result "
                           "(see its log in the run directory's logs/)"))
    reported = [n for n in nodes if n in results]
    for check in checks:
        judge = _JUDGES.get(check)
        if judge is None:
            continue
        for node in reported:
            res = results[node].get("results", {}).get(check)
            if res is None:
                if check != "port":  # only the head node checks the port
                    out.append(Row(node, check, "-", SKIP, "not run on this node"))
            elif res.get("ok") is False:
                out.append(Row(node, check, str(res.get("figure", "")), FAIL, res.get("detail", "")))
            else:
                out.append(judge(node, res, {n: results[n]["results"].get(check) for n in reported}, expect))
    if "setup" not in checks:
        out = [r for r in out if r.check != "setup" or r.verdict == FAIL]
    return out


def _rundir(node, res, all_res, _expect) -> Row:
    """A node fails when it cannot read the file of a node that wrote one (a node that
    could not write fails on its own result, and its readers are not blamed)."""
    wrote = {n for n, r in all_res.items() if r and (r.get("data") or {}).get("wrote")}
    unread = [n for n in (res.get("data") or {}).get("missing", []) if n in wrote]
    if unread:
        return Row(node, "rundir", res.get("figure", ""), FAIL,
                   f"cannot read the file(s) written by {', '.join(unread)}: not the same directory there")
    return Row(node, "rundir", res.get("figure", ""), PASS)


def _versions(node, res, all_res, _expect) -> Row:
    mine = _key(res)
    seen = [_key(r) for r in all_res.values() if r and r.get("ok") is not False]
    common = max(set(seen), key=seen.count) if seen else mine
    if mine != common:
        diff = ", ".join(f"{k} {v} (others {dict(common).get(k)})" for k, v in mine if (k, v) not in common)
        return Row(node, "versions", res.get("figure", ""), FAIL, f"differs from the other nodes: {diff}")
    return Row(node, "versions", res.get("figure", ""), PASS)


def _key(res) -> tuple:
    return tuple(sorted((k, v) for k, v in (res.get("data") or {}).items() if k != "executable"))


def _gpus(node, res, _all, expect: Expect) -> Row:
    n = res.get("value", 0)
    if expect.gpus_per_node == 0:
        return Row(node, "gpus", str(n), PASS, "no GPUs in profile")
    if n != expect.gpus_per_node:
        return Row(node, "gpus", str(n), FAIL, f"profile says slurm.gpus_per_node = {expect.gpus_per_node}")
    return Row(node, "gpus", str(n), PASS)


def _matmul(node, res, all_res, _expect) -> Row:
    values = [r["value"] for r in all_res.values() if r and r.get("ok") is not False and "value" in r]
    median = statistics.median(values) if values else res["value"]
    share = res["value"] / median if median else 1.0
    figure = f"{res.get('figure', '')}, {share:.0%} of median"
    if share < SLOW_FRACTION:
        return Row(node, "matmul", figure, WARN, f"slow: below {SLOW_FRACTION:.0%} of the median node")
    return Row(node, "matmul", figure, PASS)


def _allreduce(node, res, all_res, expect: Expect) -> Row:
    busbw = res.get("value", 0.0)
    if (res.get("data") or {}).get("world", 2) < 2:
        return Row(node, "allreduce", res.get("figure", ""), PASS, "one node: no network to measure")
    slow = _slow_link(node, res, all_res)
    if slow:
        return Row(node, "allreduce", res.get("figure", ""), WARN, slow)
    if expect.expected_busbw_gbps and busbw < SLOW_FRACTION * expect.expected_busbw_gbps:
        return Row(node, "allreduce", res.get("figure", ""), FAIL,
                   f"below {SLOW_FRACTION:.0%} of fabric.expected_busbw_gbps = {expect.expected_busbw_gbps:g}")
    # A node with a fast ring pair is not on a slow network: the whole ring's figure is
    # its slowest node's (the ring's own verdict is that node's, above).
    fastest = max(((res.get("data") or {}).get("pairs_busbw_gbps") or {busbw: busbw}).values())
    if fastest < FLOOR_BUSBW_GBPS:
        return Row(node, "allreduce", res.get("figure", ""), WARN,
                   f"a slow network: {fastest * 8000:.1f} Mbit/s busbw, below any network training runs over")
    return Row(node, "allreduce", res.get("figure", ""), PASS,
               "" if expect.expected_busbw_gbps else "no fabric.expected_busbw_gbps in profile to compare with")


def _slow_link(node, res, all_res) -> str:
    """A node whose best ring pair is below 90% of the median node's best pair: every path
    out of it is slow, so its link is. (Each pair of a slow node is slow, and a neighbour's
    other pair is not; the median of all pairs would not do: on 3 nodes, 4 of the 6 are the
    slow node's.)"""
    def best(r) -> float | None:
        pairs = ((r or {}).get("data") or {}).get("pairs_busbw_gbps") or {}
        return max(pairs.values()) if pairs else None

    mine = (res.get("data") or {}).get("pairs_busbw_gbps") or {}
    bests = [b for b in map(best, all_res.values()) if b is not None]
    if not mine or not bests:
        return ""
    median = statistics.median(bests)
    if max(mine.values()) < SLOW_FRACTION * median:
        shown = ", ".join(f"with {peer} {bw:.3g}" for peer, bw in sorted(mine.items()))
        return f"slow link: pairs {shown} GB/s, below {SLOW_FRACTION:.0%} of the median node's best pair {median:.3g}"
    return ""


def _clock(node, res, _all, _expect) -> Row:
    off = abs(res.get("value", 0.0))
    verdict = FAIL if off > CLOCK_FAIL_S else WARN if off > CLOCK_WARN_S else PASS
    return Row(node, "clock", res.get("figure", ""), verdict,
               "" if verdict == PASS else f"clock off the median node by {off:.2f} s")


def _port(node, res, _all, _expect) -> Row:
    return Row(node, "port", res.get("figure", ""), PASS)


_JUDGES = {"versions": _versions, "rundir": _rundir, "gpus": _gpus, "matmul": _matmul,
           "allreduce": _allreduce, "port": _port, "clock": _clock}


def failures(all_rows: list[Row]) -> list[Row]:
    return [r for r in all_rows if r.verdict == FAIL]


def table(all_rows: list[Row]) -> str:
    """One line per node and check: NODE CHECK VERDICT FIGURE DETAIL."""
    head = ("NODE", "CHECK", "VERDICT", "FIGURE", "DETAIL")
    cells = [head] + [(r.node, r.check, r.verdict.upper() if r.verdict == FAIL else r.verdict, r.figure, r.detail)
                      for r in all_rows]
    widths = [max(len(c[i]) for c in cells) for i in range(4)]
    return "\n".join("  ".join(c[i].ljust(widths[i]) for i in range(4)) + ("  " + c[4] if c[4] else "")
                     for c in cells).rstrip() + "\n"


def summary(all_rows: list[Row]) -> str:
    bad = failures(all_rows)
    if not bad:
        warns = [r for r in all_rows if r.verdict == WARN]
        return "doctor: every check passed" + (f" ({len(warns)} warning(s))" if warns else "")
    by_node: dict[str, list[str]] = {}
    for r in bad:
        by_node.setdefault(r.node, []).append(r.check)
    return "doctor: failing: " + "; ".join(f"{n}: {', '.join(c)}" for n, c in by_node.items())


def to_json(all_rows: list[Row], **about) -> str:
    bad = failures(all_rows)
    return json.dumps({**about, "passed": not bad, "failing": [{"node": r.node, "check": r.check} for r in bad],
                       "rows": [asdict(r) for r in all_rows]}, indent=1) + "\n"
