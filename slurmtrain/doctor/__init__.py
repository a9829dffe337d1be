"""Node health before a run: ``slurmtrain doctor``, the bad-node ledger, the in-job gate.

- :mod:`.checks` names the checks (torch-free; the CLI validates ``--checks`` with it);
- :mod:`.node` runs on every node inside the doctor job (imports torch in its checks);
- :mod:`.report` turns the nodes' results into rows (node, check, figure, verdict), the
  table and the JSON, comparing nodes with each other (versions, matmul vs the median);
- :mod:`.ledger` is the file of bad nodes that submit/resubmit exclude;
- :mod:`.run` renders, submits and waits for the doctor job (or runs it inside an
  allocation) and asks Slurm about the partition.
"""
