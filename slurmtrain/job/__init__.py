"""The job's supervisor: ``python -m slurmtrain.job``, the last line of every job script.

It runs in the batch step (the job's first node) for the job's whole life and owns every
decision the script used to make in bash: start the task on every node with ``srun``,
forward the stop signal, watch start-up, give the checkpoint its window and escalate
after it, work out why a SIGTERM came, requeue (plainly or without the bad-node
ledger's nodes), enforce the requeue limit and the preflight gate, start the launch again
in the allocation after a rank died or hung, leave out a node that died, failed again and
again or lags (a spare in its place), and print the batch log's summary line. Torch-free:
the standard library and slurmtrain's own light modules.

Read in this order:

- ``signals.py``: handlers that only record a signal; the loop takes them.
- ``slurm.py``: every Slurm command, each with a timeout; answers, never exceptions.
- ``step.py``: the ``srun`` step(s) of the task and of the preflight gate.
- ``decide.py``: pure functions from what happened to what to do (tested without Slurm).
- ``hangs.py``: the ranks' heartbeats against the hang timeout; every rank's stack.
- ``nodes.py``: which nodes a launch runs on (spares, nodes left out); the probe of nodes.
- ``stragglers.py``: the ranks' compute times (sent with their heartbeats) compared.
- ``supervisor.py``: the one loop that watches, asks ``decide`` and acts.
- ``faults.py``: the supervisor's part for nodes that fail or lag in the job (a mixin).
- ``__main__.py``: the command line (the knobs the script shows).

Why no races: a signal handler appends to a list and nothing else; every decision is
taken in the loop, between Slurm commands, never inside one. A Slurm command that Slurm's
own SIGTERM kills (every process of a job gets it when the job is requeued) is an answer
like any other ("killed"), and the decisions that follow it ask Slurm again rather than
trust it.
"""
