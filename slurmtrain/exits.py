"""Exit statuses: the batch step's (its summary line's) and the stop contract's, one
definition each. The supervisor exits with them, the stop contract's programs with
EXIT_STOPPED (the job script's agent passes it on: templates/task.j2), and ``status`` reads
them back once Slurm has forgotten the job (eventlog.ENDINGS). Standard library only: the
renderer imports it on gen's path."""

EXIT_OK = 0             # finished; or requeued (the job comes back), or a requeue refused (`resubmit`)
EXIT_FAILED = 1         # the supervisor could not go on: no node list, a requeue without bad nodes failed
EXIT_REQUEUE_LIMIT = 3  # stopped, or nodes lost, at resilience.max_requeues
EXIT_START_UP = 4       # the start-up watchdog: a node never joined, or a setup line failed
EXIT_STOPPED = 75       # a program's "stopped after a checkpoint; requeue me" (sysexits' EX_TEMPFAIL)
# (Any other status is the launch's own: the program's, or srun's 143 after a SIGTERM.)


def signal_of(status: int) -> int | None:
    """The signal a launch's status says its process died of: -N (Python's own report of a
    child) or 128+N (a shell's, srun's); None for an exit."""
    if -65 < status < 0:
        return -status
    return status - 128 if 128 < status <= 128 + 64 else None
