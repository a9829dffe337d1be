"""The sandbox's own errors (all are SlurmtrainError, so the CLI prints them on one line)."""

from __future__ import annotations

from ..errors import SlurmtrainError


class SandboxError(SlurmtrainError):
    """The sandbox could not be started, stopped or inspected."""


class SandboxUnavailable(SandboxError):
    """This machine cannot run the sandbox at all (not root, not Linux, no apt-get).

    Tests skip on this one (and fail under CI=true); any other SandboxError is a bug."""


class DaemonFailed(SandboxError):
    """A daemon did not come up; the message names it and its log."""

    def __init__(self, daemon: str, log: str, detail: str):
        self.daemon = daemon
        self.log = log
        super().__init__(f"{daemon} did not start: {detail}; see its log: {log}")
