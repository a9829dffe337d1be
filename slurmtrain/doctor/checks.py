"""The names of doctor's checks and what each needs; torch-free (the CLI path imports it)."""

from __future__ import annotations

from ..errors import UsageError

# name -> what it checks (shown by `doctor --help` and in the table's legend)
CHECKS: dict[str, str] = {
    "setup": "the node ran the job's setup lines and container and started the checks",
    "versions": "Python, torch (and deepspeed for that launcher) versions equal on every node",
    "rundir": "the run directory is writable on every node and each node reads the others' files",
    "gpus": "GPU count equals slurm.gpus_per_node",
    "matmul": "matmul throughput (bf16 on GPU, fp32 on CPU); slow below 90% of the median node",
    "allreduce": "all-reduce bus bandwidth across the nodes (NCCL on GPU, gloo on CPU), "
                 "vs fabric.expected_busbw_gbps when set",
    "port": "the rendezvous port on the head node is free or held by this job's own rendezvous",
    "clock": "clock skew between nodes",
    "slurm": "partition facts: preemption mode and grace time, requeue allowed, sacct answers",
}
DEFAULT = tuple(CHECKS)
# Checks computed on the nodes (the rest: "setup" from which nodes reported, "slurm" by the CLI).
NODE_CHECKS = ("versions", "rundir", "gpus", "matmul", "allreduce", "port", "clock")
# The in-job gate's subset: seconds, not minutes.
FAST = ("setup", "versions", "rundir", "gpus", "port", "clock")


def parse(text: str | None) -> tuple[str, ...]:
    """``a,b`` -> the checks in the canonical order; an unknown name is a UsageError."""
    if not text:
        return DEFAULT
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in CHECKS]
    if unknown:
        from ..schema import _near
        raise UsageError(f"--checks: unknown check {unknown[0]!r}{_near(unknown[0], list(CHECKS))}; "
                         f"known checks: {', '.join(CHECKS)}")
    if not names:
        raise UsageError(f"--checks: no check named; known checks: {', '.join(CHECKS)}")
    return tuple(n for n in CHECKS if n in names)
