"""deepspeed: DeepSpeed's per-node launcher (deepspeed.launcher.launch) on every node
through srun, its world layout built from the node list: no pdsh, no ssh, no hand-written
hostfile."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

from ..shellwords import Raw
from .base import Launcher, Words

# DeepSpeed's launcher kills its workers 30 s after it gets SIGTERM (hard-coded in
# deepspeed.launcher.launch.terminate_process_tree, through psutil.wait_procs): the job
# script's agent stretches that wait to resilience.stop_timeout (templates/task.j2).
# A failed worker: its launcher logs "... exits with return code = N".
RETURN_CODE = re.compile(r"exits with return code = (-?\d+)")


def words(w: Words) -> list[str]:
    out = [w.python, "-c", Raw('"$SLURMTRAIN_AGENT"'), "deepspeed.launcher.launch",
           Raw('--world_info="$WORLD_INFO"'), Raw('--node_rank="$node_rank"'),
           Raw('--master_addr="$MASTER_ADDR"'), Raw('--master_port="$MASTER_PORT"')]
    out += {"module": ["--module"], "exec": ["--no_python"], "script": []}[w.kind]
    # DeepSpeed appends --local_rank=N to the program's arguments unless told not to: a
    # script of one's own gets it as `deepspeed` in its command would have given it (not
    # after --no_local_rank; a module too); the built-in trainer, plain executables and
    # scripts written for torchrun read LOCAL_RANK from the environment (and may refuse an
    # unknown argument).
    as_in_command = w.launcher_in_command == "deepspeed" and w.local_rank_option and w.kind in ("script", "module")
    if not (w.own_argv and (as_in_command or (w.launcher_in_command is None and w.kind == "script"))):
        out.append("--no_local_rank")
    return out


def world(nodes: list[str], procs: int, run_dir: Path, job_id: str) -> dict[str, str]:
    """DeepSpeed's per-node launcher needs the world layout (``--world_info``, base64 JSON of
    node -> slots); a hostfile is written too, for tools that want one. No pdsh, no ssh."""
    hostfile = run_dir / f"hostfile-{job_id}"
    hostfile.write_text("".join(f"{n} slots={procs}\n" for n in nodes))
    layout = json.dumps({n: list(range(procs)) for n in nodes})
    return {"WORLD_INFO": base64.b64encode(layout.encode()).decode(), "SLURMTRAIN_HOSTFILE": str(hostfile)}


# Its wait for the workers after a SIGTERM, made the stop window (resilience.stop_timeout).
STRETCH = ("import psutil  # the DeepSpeed launcher gives its workers 30 s after a SIGTERM: the stop window instead\n"
           "wait = psutil.wait_procs; psutil.wait_procs = lambda ps, timeout=None, callback=None: "
           "wait(ps, timeout and max(timeout, {stop_timeout}), callback)")

LAUNCHER = Launcher("deepspeed", "DeepSpeed's launcher on every node via srun", words, env=world, agent_preamble=STRETCH,
                    runner_files=(".deepspeed_env",),
                    script_fragment="launcher-deepspeed.j2", gate_args=("--deepspeed",),
                    exit_status_in_log=RETURN_CODE, local_rank_option=True)
