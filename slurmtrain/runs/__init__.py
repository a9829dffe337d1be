"""Run directories, submission through submitit, and tracking (status, logs, cancel).

``rundir`` (files), ``slurmquery`` and ``states`` (Slurm, no submitit), ``submit`` and
``track`` (the operations), ``jobs`` (submitit's executor and job objects; imports submitit).
"""
