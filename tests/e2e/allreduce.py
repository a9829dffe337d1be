"""Test program for the end-to-end tests: every rank joins one gloo process group,
all-reduces its rank + 1 and appends one JSON line to ``$SLURMTRAIN_RUN_DIR/ranks.jsonl``.

``--exit-code N`` makes every rank exit with N after the all-reduce. Accepts ``--local_rank=N`` (DeepSpeed's launcher passes it) and echoes every other
argument back in ``args``, so a test can check that arguments arrive unchanged.
"""

import json
import os
import sys

import torch
import torch.distributed as dist


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith(("--local_rank=", "--local-rank="))]
    exit_code = int(args[args.index("--exit-code") + 1]) if "--exit-code" in args else 0
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    total = torch.tensor([float(rank + 1)])
    dist.all_reduce(total)
    record = {
        "rank": rank,
        "world_size": world,
        "local_rank": int(os.environ.get("LOCAL_RANK", -1)),
        "node": os.environ.get("SLURMD_NODENAME"),
        "sum": total.item(),
        "args": args,
        "prefix": sys.prefix,  # which Python environment ran this rank
        "gloo_ifname": os.environ.get("GLOO_SOCKET_IFNAME"),
    }
    # One short line with O_APPEND: lines from several processes do not interleave.
    fd = os.open(os.path.join(os.environ["SLURMTRAIN_RUN_DIR"], "ranks.jsonl"),
                 os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, (json.dumps(record) + "\n").encode())
    os.close(fd)
    print(f"rank {rank}/{world} on {record['node']}: all-reduce sum {record['sum']}", flush=True)
    dist.destroy_process_group()
    if exit_code:
        print(f"rank {rank}: exiting with status {exit_code} as asked", flush=True)
        sys.exit(exit_code)


if __name__ == "__main__":
    main()
