"""What a launcher is (the registry: __init__.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable


@dataclass(frozen=True)
class Words:
    """What a launcher's words are made of: the interpreter that runs it, and the program."""

    python: str
    kind: str                          # the program: "module", "script" or "exec"
    rendezvous_timeout: int            # resilience.rendezvous_timeout
    own_argv: bool                     # a user's script (not the built-in trainer), whose
    launcher_in_command: str | None    # ... command named this launcher (command.py)
    local_rank_option: bool = True     # ... which would have appended --local_rank=N (not told --no_local_rank)


@dataclass(frozen=True)
class Launcher:
    name: str
    doc: str
    # The words before the program's argv (the interpreter included where it runs the program).
    words: Callable[[Words], list[str]]
    agent: bool = True                 # an agent per node starts the processes (False: a Slurm task each)
    per_node_srun: bool = False        # one srun per node, not one for all (sites where one cannot start containers)
    node_rank: bool = True             # the task is told its node's rank ($node_rank)
    elastic: bool = False              # torch elastic agents: TORCH_ELASTIC_SHUTDOWN_TIMEOUT is the stop window
    # What the supervisor adds to the task's environment for the nodes it runs on.
    env: Callable[[list[str], int, Path, str], dict[str, str]] | None = None
    script_fragment: str | None = None  # a template of the plain script's own lines (templates/)
    gate_args: tuple[str, ...] = ()    # doctor's node checks (the gate, `slurmtrain doctor`) for it
    term_window: int | None = None     # seconds it gives its workers after SIGTERM, whatever stop_timeout says
    # Python lines the job script's agent runs before the launcher's module ({stop_timeout}
    # filled in); inside a single-quoted shell word: no ' in them.
    agent_preamble: str = ""
    # Files its own multi-node runner reads (here or in the home folder), which the job does not use.
    runner_files: tuple[str, ...] = ()
    # Its report of a failed worker in a node log: group 1 the program's own exit status (the
    # launcher's is 1 whatever the program's was), and its own exceptions, which are not the program's.
    exit_status_in_log: re.Pattern | None = None
    own_exceptions: tuple[str, ...] = ()
    local_rank_option: bool = False    # appends --local_rank=N to a user's script's arguments

    def tasks_per_node(self, procs_per_node: int) -> int:
        """Slurm tasks on each node: one agent, or every process."""
        return 1 if self.agent else procs_per_node
