"""A real Slurm cluster on one machine, for trying jobs and for tests.

``up()`` installs Slurm where it is missing (Debian/Ubuntu, as root), writes its
configuration under one state directory (``/var/lib/slurmtrain-sandbox``, or
``$SLURMTRAIN_SANDBOX_DIR``) and starts munged, slurmctld and one slurmd per node
(``slurmd -N stnode1`` ...), plus MariaDB and slurmdbd with ``accounting=True``.
Talk to it with ``SLURM_CONF=<state dir>/slurm.conf`` (``slurm_env()`` gives that).

    from slurmtrain import sandbox
    info = sandbox.up(nodes=2, cpus_per_node=4)
    subprocess.run(["sbatch", "job.sh"], env=sandbox.slurm_env())
    sandbox.down()
"""

from .cluster import SandboxInfo, down, is_up, revive, slurm_env, status, up
from .config import CLUSTER_NAME, NODE_PREFIX, PARTITIONS, Settings
from .errors import DaemonFailed, SandboxError, SandboxUnavailable
from .install import unavailable_reason
from .layout import STATE_DIR_ENV, state_dir

__all__ = [
    "up", "down", "revive", "status", "is_up", "slurm_env", "state_dir", "unavailable_reason",
    "SandboxInfo", "Settings", "SandboxError", "SandboxUnavailable", "DaemonFailed",
    "NODE_PREFIX", "PARTITIONS", "CLUSTER_NAME", "STATE_DIR_ENV",
]
