"""`slurmtrain status` from a laptop over ssh against the same command on the login node.

Run as the laptop user with a remote configured (the container lane does it:
`SLURMTRAIN_LANE_PARTS=bench bash scripts/container_lane.sh`):

    python scripts/bench_remote.py --remote lane [--runs 7]

1. The login node's own `slurmtrain status RUN` (timed there, in the same ssh session).
2. One round trip over the shared connection (`true` on the login node).
3. `slurmtrain --remote R status RUN` from here.
Goal: (3) <= 1.5 x (1) + (2), medians, alternating in the same run. Also: the handshakes a
`watch` of a 60 s job makes, from a closed connection (counted in the login node's sshd
log, --login-log: "Accepted publickey" lines).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from slurmtrain import remote as rm  # noqa: E402


def timed(argv: list[str]) -> float:
    t = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{argv}: exit {done.returncode}: {done.stderr.strip()}")
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--remote", required=True)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--login-log", type=Path, help="the login node's sshd log (VERBOSE), if readable")
    args = ap.parse_args()
    r = rm.load(args.remote)
    ssh = rm.Ssh(r)
    ssh.connect()
    run = "bench"
    made = subprocess.run(["slurmtrain", "--remote", args.remote, "submit", "--profile", "local", "--launcher",
                           "srun", "-N", "1", "--name", run, "--", "sleep", "60"], capture_output=True, text=True)
    if made.returncode != 0:
        sys.exit(made.stderr)
    there_script = rm.remote_script(r, ["status", run]).replace("exec ", "", 1)
    local, rtt, remote = [], [], []
    for _ in range(args.runs):
        out = ssh.capture(f"s=$(date +%s%N); ( {there_script} ) >/dev/null; echo $(( $(date +%s%N) - s ))")
        local.append(int(out.stdout.split()[-1]) / 1e9)
        rtt.append(timed(ssh.argv("true")))
        remote.append(timed(["slurmtrain", "--remote", args.remote, "status", run]))
    lo, rt, re_ = (statistics.median(x) for x in (local, rtt, remote))
    print(f"status on the login node   {lo * 1000:7.0f} ms (median of {args.runs})")
    print(f"one round trip (shared)    {rt * 1000:7.0f} ms")
    print(f"status from the laptop     {re_ * 1000:7.0f} ms")
    print(f"ratio (laptop - round trip) / login node: {(re_ - rt) / lo:.2f} (goal <= 1.5)")

    ssh.control("exit")
    before = args.login_log.read_text().count("Accepted publickey") if args.login_log else None
    t0 = time.monotonic()
    watched = subprocess.run(["slurmtrain", "--remote", args.remote, "watch", "--interval", "2", run],
                             capture_output=True, text=True)
    took = time.monotonic() - t0
    lines = len(watched.stdout.splitlines())
    if before is not None:
        made = args.login_log.read_text().count("Accepted publickey") - before
        print(f"watch until the job ended: {took:.0f} s, {lines} lines, {made} ssh handshake(s)")
    else:
        print(f"watch until the job ended: {took:.0f} s, {lines} lines (no --login-log: handshakes not counted)")


if __name__ == "__main__":
    main()
