"""The container lane's profile (tests/containers/)."""

from __future__ import annotations

import os
from pathlib import Path

IMAGE = os.environ.get("SLURMTRAIN_CONTAINER_IMAGE", "")
PYTHON_TREE = os.environ.get("SLURMTRAIN_CONTAINER_PYTHON", "")


def profile_text(binds: list[str], launcher: str = "srun-loop", container: str = 'home = ""\nworkdir = ""',
                 extra: str = "", pythonpath: str = "") -> str:
    """A profile for the container sandbox extending the built-in `hpc-apptainer`: its image,
    the suite's Python bound at its own path (the image has none of its own), this checkout,
    and ``binds``; CPU only (no --nv), gloo over loopback, the sandbox's partition. The
    rendezvous port follows the job id, as the `local` profile's, in a range of its own
    (10000 + job id % 2000): the lane's sandbox hands out the same job ids as the suite's
    three-node sandbox, which may run at the same time. ``container``: the [container] keys
    besides the image, binds and env (by default no home or working directory of the
    parent's); ``extra``: more TOML sections. Inside the image PYTHONPATH is this checkout
    (then ``pythonpath``), over the parent's /workspace: the ranks import the slurmtrain under
    test, whatever the bound Python has installed."""
    repo = str(Path(__file__).resolve().parents[2])
    all_binds = [PYTHON_TREE, repo, *binds]
    return f'''extends = "hpc-apptainer"
description = "the container sandbox: apptainer 1.4, CPU only, gloo over loopback"

[slurm]
partition = "low"
nodes = 2
gpus_per_node = 0
cpus_per_task = 2
time = "00:30:00"

[container]
image = "{IMAGE}"
{container}
binds = {all_binds!r}
env = {{ OMP_NUM_THREADS = "1", PYTHONPATH = "{':'.join(filter(None, [repo, pythonpath]))}" }}

[fabric]
kind = "socket"
socket_ifname = "lo"
nccl_debug = ""
env = {{}}

[launch]
launcher = "{launcher}"
procs_per_node = 2
rdzv_port = 10000
rdzv_port_spread = 2000
setup = []

[env]
secrets = []

[resilience]
signal_seconds = 60
stop_timeout = 45
rendezvous_timeout = 180
straggler_pct = 0
{extra}'''


def owned_by_root(folder: Path) -> list[str]:
    """Every file and folder under ``folder`` (itself too) that root owns: none may be, after
    a job an ordinary user submitted."""
    return [str(p) for p in [folder, *folder.rglob("*")] if p.lstat().st_uid == 0]
