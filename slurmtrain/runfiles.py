"""The names of a run directory's files that both sides write or read: the job on the nodes
(its supervisor, the trainer, a program through slurmtrain.stop) and the commands on the
login node (runs/rundir.py says what each holds)."""

MANIFEST = "manifest.json"     # what was submitted, from where, and what Slurm answered
SCRIPT = "job.sbatch"          # the exact script given to sbatch
METRICS_FILE = "metrics.jsonl"  # a line per logged step: watch, status and plot read it
