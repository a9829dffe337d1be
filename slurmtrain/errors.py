"""The project's own error types.

Every error a user can cause is one of these; the CLI prints ``str(err)`` on one
line and exits with ``err.exit_code``. Nothing a user types should ever surface as
a traceback.
"""

from __future__ import annotations


class SlurmtrainError(Exception):
    """Base class for every error slurmtrain reports to a user."""

    exit_code = 1


class ConfigError(SlurmtrainError):
    """A profile, recipe or ``--set`` value is invalid.

    ``source`` names the file (or ``--set``), ``key`` the dotted key.
    """

    exit_code = 2

    def __init__(self, source: str, key: str, message: str):
        self.source = source
        self.key = key
        self.message = message
        where = f"{source}: {key}" if key else source
        super().__init__(f"{where}: {message}")


class UsageError(SlurmtrainError):
    """The command line asks for something that cannot be done."""

    exit_code = 2


class SlurmError(SlurmtrainError):
    """Slurm refused or failed a request; the message carries Slurm's own words."""

    exit_code = 1
