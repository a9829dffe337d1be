"""A process that has imported the trainer once and forks each test run's ranks from itself.

    python tests/train/rank_server.py SOCKET

Each start of ``python -m slurmtrain.train`` spends ~4 CPU-s importing torch, DTensor, DCP,
torch._dynamo and DeepSpeed before its first step, and the trainer tests start it ~200
times: on this suite's 2 cores that was a third of the whole run. ``trainer_util`` starts
one server per pytest process; ``spawn_ranks.py --server SOCKET N python -m MODULE ARGS``
(or ``-c CODE``) hands it its standard streams, working directory and environment, and the
server forks a child that runs N ranks as spawn_ranks.py would, each rank a fork that runs
the module as ``python -m`` does (``runpy``), from an interpreter where those imports are
done. The training itself is the same code on the same torch.distributed; what is not the
same is how the interpreter started, so the tests of start-up (the early stop handler, the
real torchrun, every Slurm test) start the trainer as users do.

Protocol, one connection per run: the client sends an 8-byte length with its fds 0, 1 and 2
(SCM_RIGHTS), then that many bytes of JSON ``{"n", "argv", "cwd", "env"}``; the server
answers ``pid N``, and when that child ends ``exit CODE`` (negative: the signal that killed
it). A client that goes away takes its run with it (SIGKILL to the child's process group).
"""

from __future__ import annotations

import importlib
import json
import os
import select
import signal
import socket
import struct
import sys

from spawn_ranks import FORWARDED, Forked, report, supervise, rank_env, free_port

PRELOAD = ("slurmtrain.train.trainer", "slurmtrain.train.engines.deepspeed_engine", "slurmtrain.train.engines.fsdp2", "slurmtrain.train.engines.pipeline",
           "slurmtrain.train.hf", "torch._dynamo", "torch.distributed.checkpoint.state_dict",
           "torch.distributed.fsdp", "deepspeed")


def preload() -> None:
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:  # deepspeed is optional: its runs import it themselves
            pass


def run_as_main(argv: list[str]) -> int:
    """``python ARGV``'s exit status for ARGV = ``-m MODULE ARGS`` or ``-c CODE ARGS``, run in
    this process (a fresh fork); output flushed, atexit run, as the interpreter would."""
    import atexit
    import runpy
    import traceback
    code = 0
    try:
        if argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = ["-c", *argv[2:]]
            exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__"})
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - the interpreter prints it and exits 1
        traceback.print_exc()
        code = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    return code


def fork_rank(argv: list[str], env: dict[str, str]) -> Forked:
    pid = os.fork()
    if pid == 0:
        Forked.die_with_parent()
        os._exit(run_here(argv, env))
    return Forked(pid)


def child(request: dict, fds: list[int]) -> int:
    """The run: its streams, directory and environment; one rank runs here, more are forked."""
    os.setpgid(0, 0)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    n, argv = request["n"], request["argv"]
    if n == 1:  # as ``python ARGV`` itself: its exit status and signals are the run's
        return run_here(argv, rank_env(0, 1, str(free_port())))
    port = str(free_port())
    ranks = [fork_rank(argv, rank_env(rank, n, port)) for rank in range(n)]
    for sig in FORWARDED:
        signal.signal(sig, lambda s, _f: [r.send_signal(s) for r in ranks if r.poll() is None])
    return report(supervise(ranks))


def run_here(argv: list[str], env: dict[str, str]) -> int:
    """Run ``python ARGV`` in this process with ``env`` added and the signals' default actions."""
    for sig in FORWARDED:
        signal.signal(sig, signal.SIG_DFL)
    os.environ.update(env)
    return run_as_main(argv)


def read_request(conn: socket.socket) -> tuple[dict, list[int]]:
    head, fds, _, _ = socket.recv_fds(conn, 8, 3)
    (size,) = struct.unpack("!Q", head)
    body = b""
    while len(body) < size:
        chunk = conn.recv(size - len(body))
        if not chunk:
            raise ConnectionError("client left mid-request")
        body += chunk
    return json.loads(body), list(fds)


def start(conn: socket.socket, listener: socket.socket, others: list[socket.socket]) -> int | None:
    try:
        request, fds = read_request(conn)
    except (OSError, ValueError, struct.error) as err:
        print(f"rank_server: bad request: {err}", file=sys.stderr, flush=True)
        return None
    pid = os.fork()
    if pid == 0:
        for s in (listener, *others):
            s.close()
        try:
            code = child(request, fds)
        except BaseException:  # noqa: BLE001 - report, never return into the server's loop
            import traceback
            traceback.print_exc()
            code = 1
        os._exit(code)
    try:
        os.setpgid(pid, pid)  # as the child does: whichever runs first, no window without it
    except OSError:
        pass
    for fd in fds:
        os.close(fd)
    conn.sendall(f"pid {pid}\n".encode())
    return pid


def serve(path: str) -> None:
    parent = os.getppid()
    preload()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + ".tmp")
    listener.listen(16)
    os.rename(path + ".tmp", path)  # the path appears once the server is ready
    runs: dict[int, socket.socket] = {}
    while os.getppid() == parent:
        ready, _, _ = select.select([listener, *runs.values()], [], [], 0.5)
        for s in ready:
            if s is listener:
                conn, _ = listener.accept()
                pid = start(conn, listener, list(runs.values()))
                if pid is None:
                    conn.close()
                else:
                    runs[pid] = conn
            else:  # a client sends nothing after its request: this is it leaving
                pid = next(p for p, c in runs.items() if c is s)
                _kill_group(pid)
                runs.pop(pid).close()
        _reap(runs)


def _reap(runs: dict[int, socket.socket]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = runs.pop(pid, None)
        if conn is not None:
            try:
                conn.sendall(f"exit {os.waitstatus_to_exitcode(status)}\n".encode())
            except OSError:
                pass
            conn.close()


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: rank_server.py SOCKET", file=sys.stderr)
        sys.exit(2)
    serve(sys.argv[1])
