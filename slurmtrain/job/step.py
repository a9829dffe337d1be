"""The ``srun`` steps the supervisor starts: the task on every node, and the preflight gate.

The task's text is the script's own bash functions (``declare -f``, in ``SLURMTRAIN_TASK``
and ``SLURMTRAIN_GATE``): srun runs ``bash -c`` with them on every node, as the script
would have. srun passes a signal it gets on to every process of its tasks; a SIGTERM to
srun itself makes it SIGKILL them ("forcing job termination").
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from .. import launchers


def exit_status(rc: int) -> int:
    """A shell's view of a child's status: 128+N for death by signal N."""
    return 128 - rc if rc < 0 else rc


class Step:
    """One launch: one srun, or one per node (the srun-loop launcher)."""

    def __init__(self, procs: list[subprocess.Popen]):
        self.procs = procs

    def poll(self) -> int | None:
        """None while any srun runs; then the first non-zero status (in launch order), else 0."""
        codes = [p.poll() for p in self.procs]
        if any(c is None for c in codes):
            return None
        return next((exit_status(c) for c in codes if c), 0)

    def send(self, signum: int) -> None:
        for p in self.procs:
            if p.poll() is None:
                try:
                    p.send_signal(signum)
                except ProcessLookupError:
                    pass


@dataclass(frozen=True)
class Launch:
    """How to start the task: the launcher's shape, with the script's functions."""

    launcher: str                  # a name in launchers.LAUNCHERS
    procs_per_node: int
    run_dir: Path
    srun_options: tuple[str, ...] = ()
    task: str = ""                 # the script's slurmtrain_task and its helpers (declare -f)
    gate: str = ""                 # ... and slurmtrain_gate, with resilience.preflight
    env: dict[str, str] = field(default_factory=dict)

    def _srun(self, shape: list[str], body: str, name: str, *args: str) -> list[str]:
        return ["srun", *shape, *self.srun_options, "bash", "-c", f'{body}\n{name} "$@"', f"{name}", *args]

    def environment(self, nodes: list[str]) -> dict[str, str]:
        """What the task needs to know of the nodes it runs on."""
        env = {**os.environ, **self.env, "MASTER_ADDR": nodes[0], "SLURMTRAIN_HEAD_NODE": nodes[0],
               "SLURMTRAIN_NNODES": str(len(nodes)), "SLURMTRAIN_PROCS_PER_NODE": str(self.procs_per_node)}
        for name in ("SLURMTRAIN_TASK", "SLURMTRAIN_GATE"):
            env.pop(name, None)  # the task's own text: no program needs it
        spec = launchers.get(self.launcher)
        if spec.env is not None:
            env.update(spec.env(nodes, self.procs_per_node, self.run_dir, os.environ.get("SLURM_JOB_ID", "")))
        return env

    def start_task(self, nodes: list[str], overlap: bool = False) -> Step:
        """``overlap``: after a node was lost. The old step holds its nodes' resources until
        Slurm hears from every node of it, a dead one never (until Slurm marks it down)."""
        env = self.environment(nodes)
        n = str(len(nodes))
        extra = ["--overlap"] if overlap else []
        spec = launchers.get(self.launcher)
        if spec.per_node_srun:  # one srun per node, for sites where one srun cannot start the containers
            argvs = [self._srun(["--nodes=1", "--ntasks=1", "-w", node, "--kill-on-bad-exit=1", *extra], self.task,
                                "slurmtrain_task", str(i)) for i, node in enumerate(nodes)]
        else:
            per_node = str(spec.tasks_per_node(self.procs_per_node))
            # --ntasks too: srun takes the job's SLURM_NTASKS (spares included) from its environment.
            argvs = [self._srun([f"--nodes={n}", f"--ntasks={len(nodes) * int(per_node)}",
                                 f"--ntasks-per-node={per_node}", "-w", ",".join(nodes), "--kill-on-bad-exit=1",
                                 *extra],
                                self.task, "slurmtrain_task")]
        return Step([subprocess.Popen(a, env=env, stdin=subprocess.DEVNULL) for a in argvs])

    def node_of_task(self, nodes: list[str], task: int) -> str | None:
        """The node that ran task ``task`` of start_task's step on ``nodes``: srun's block layout,
        ``tasks_per_node`` each, in the order of -w. None for one srun per node, where every
        srun's task is 0."""
        spec = launchers.get(self.launcher)
        if spec.per_node_srun:
            return None
        at = task // spec.tasks_per_node(self.procs_per_node)
        return nodes[at] if at < len(nodes) else None

    def start_gate(self, nodes: list[str], gate_dir: Path) -> Step:
        argv = self._srun([f"--nodes={len(nodes)}", f"--ntasks={len(nodes)}", "--ntasks-per-node=1", "-w",
                           ",".join(nodes)], self.gate,
                          "slurmtrain_gate")
        env = {**self.environment(nodes), "SLURMTRAIN_GATE_DIR": str(gate_dir)}
        return Step([subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL)])
