"""Where the sandbox keeps its files: one state directory holds everything.

The directory is ``/var/lib/slurmtrain-sandbox`` unless ``SLURMTRAIN_SANDBOX_DIR``
names another. Nothing the sandbox writes lives outside it, except its marked
block in ``/etc/hosts``.
"""

from __future__ import annotations

import os
import zlib
from dataclasses import dataclass
from pathlib import Path

DEFAULT_STATE_DIR = "/var/lib/slurmtrain-sandbox"
JOB_ID_EPOCH = 100_000   # ids a controller hands out before its state is cleared: a CI run uses hundreds
MAX_EPOCHS = 600         # ... and slurm.conf's MaxJobId (67,043,328 by default) bounds them
STATE_DIR_ENV = "SLURMTRAIN_SANDBOX_DIR"


def state_dir() -> Path:
    """The state directory: ``$SLURMTRAIN_SANDBOX_DIR`` or the default."""
    return Path(os.environ.get(STATE_DIR_ENV) or DEFAULT_STATE_DIR).absolute()


@dataclass(frozen=True)
class Layout:
    """Every path the sandbox uses, derived from one root."""

    root: Path

    @classmethod
    def current(cls) -> "Layout":
        return cls(state_dir())

    @property
    def port_base(self) -> int:
        """First of the ~100 TCP ports this sandbox uses (slurmctld, slurmdbd, MariaDB, slurmds).

        The default state directory gets 16800; any other gets its own block derived
        from its path, so a second sandbox (a test's, say) can run beside the default."""
        if self.root == Path(DEFAULT_STATE_DIR):
            return 16800
        return 17000 + (zlib.crc32(str(self.root).encode()) % 150) * 100

    @property
    def first_job_id(self) -> int:
        """The first job id a fresh controller hands out (slurm.conf's FirstJobId).

        Sandboxes side by side on this one machine share node names and addresses, and
        the `local` profile's rendezvous port is 29500 + job id % 2000: so the default
        sandbox counts from 1 and any other from 501, 1001 or 1501 (by its port block),
        500 jobs apart modulo 2000.

        A controller whose saved state was cleared (its nodes changed) counts from its first
        id again, while the accounting database keeps every job: each clearing moves the
        first id on by JOB_ID_EPOCH (a multiple of 2000), so no id names two jobs there."""
        first = 1 if self.root == Path(DEFAULT_STATE_DIR) else 1 + 500 * (1 + (self.port_base - 17000) // 100 % 3)
        return first + JOB_ID_EPOCH * (self.job_id_epoch % MAX_EPOCHS)

    @property
    def job_id_epoch(self) -> int:
        """How many times the controller's saved state was cleared (see first_job_id)."""
        try:
            return int(self.epoch_file.read_text())
        except (OSError, ValueError):
            return 0

    @property
    def epoch_file(self) -> Path:
        return self.root / "job-id-epoch"

    # configuration
    @property
    def settings(self) -> Path:
        """JSON record of the settings the running sandbox was started with."""
        return self.root / "settings.json"

    @property
    def slurm_conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def cgroup_conf(self) -> Path:
        """Slurm reads cgroup.conf from beside slurm.conf."""
        return self.root / "cgroup.conf"

    @property
    def slurmdbd_conf(self) -> Path:
        return self.root / "slurmdbd.conf"

    # munge
    @property
    def munge_dir(self) -> Path:
        return self.root / "munge"

    @property
    def munge_key(self) -> Path:
        return self.munge_dir / "munge.key"

    @property
    def munge_socket(self) -> Path:
        return self.munge_dir / "munge.socket"

    # daemons
    @property
    def run_dir(self) -> Path:
        """Pid files, one per daemon the sandbox started."""
        return self.root / "run"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def ctld_state(self) -> Path:
        """slurmctld's StateSaveLocation."""
        return self.root / "spool" / "ctld"

    @property
    def spool(self) -> Path:
        """Parent of the per-node slurmd spool directories."""
        return self.root / "spool"

    @property
    def mysql_dir(self) -> Path:
        return self.root / "mysql"

    @property
    def mysql_data(self) -> Path:
        return self.mysql_dir / "data"

    @property
    def mysql_socket(self) -> Path:
        return self.mysql_dir / "mysqld.sock"

    def pid_file(self, daemon: str) -> Path:
        return self.run_dir / f"{daemon}.pid"

    def log(self, daemon: str) -> Path:
        return self.logs / f"{daemon}.log"

    def make_dirs(self) -> None:
        for d in (self.root, self.munge_dir, self.run_dir, self.logs, self.ctld_state, self.mysql_dir):
            d.mkdir(parents=True, exist_ok=True)
        # munged refuses a key or socket directory that others may write to. Others may pass
        # through it (not list it): every user's Slurm commands reach the socket there; the
        # key in it stays root's (0600).
        self.root.chmod(0o755)
        self.munge_dir.chmod(0o711)
