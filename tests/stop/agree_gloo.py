"""One rank of tests/stop/test_stop_helper.py's two-rank gloo test: rank 1 gets the stop
signal, both agree at the next "step", save, report (rank 0 only) and exit 75."""

import json
import os
import signal

import torch.distributed as dist

from slurmtrain import stop

stop.install()
dist.init_process_group("gloo")
if dist.get_rank() == 1:
    os.kill(os.getpid(), signal.SIGUSR2)
try:
    agreed = stop.agree(stop.should_stop())
    print(json.dumps({"rank": dist.get_rank(), "agreed": agreed, "reason": stop.reason()}), flush=True)
    if agreed:
        stop.barrier()  # "every rank saved"
        stop.saved(5)
        stop.stopped(5)
finally:
    dist.destroy_process_group()
