"""slurmtrain: multi-node LLM training on Slurm from one command."""

__version__ = "0.1.0"
