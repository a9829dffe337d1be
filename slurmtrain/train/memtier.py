"""Checkpoints in node memory (``train.memory_steps``), between the durable ones.

Every ``memory_steps`` steps each rank writes its own part of the state (the local shards of
the model and optimizer, the schedule, the data position, its RNG) to its node's memory,
``/dev/shm/slurmtrain/<job>-<start>/<node>/step_<N>-<layout>/rank<R>.pt``, and sends a copy to
the same local rank on the next node (a ring over nodes), which keeps it beside its own. The
training loop waits only for the state to be copied to host memory (``local_state``); its
serialization, the write and the send run in a thread beside the next steps, and the next
copy, a restore or the end waits for them. A rank that dies meanwhile leaves that step unwhole: the step before
stays (``KEEP``). The files outlive the training processes, so an in-job restart (new
processes, same allocation) loads the newest step that every rank can get: from its own
node, or, when its node was replaced by a spare, from the peer that kept its copy, over the
network. A requeue is a new start (``SLURM_RESTART_COUNT``) with an empty folder: it loads
the durable checkpoint.

Only a restart with the same layout (world size, ranks a node, pipeline stages) loads from
memory; any other takes the durable tier. DeepSpeed keeps its own state: not supported.
Where the files are: slurmtrain/nodememory.py.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import threading
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from .. import nodememory
from ..nodememory import node_name, start_dir

KEEP = 2  # steps kept in memory: a copy being written never leaves a rank without one


class MemoryTier:
    """One rank's side of the tier. ``state`` is the engine's DcpState (local_state, load_local)."""

    def __init__(self, state: Any, layout: dict[str, Any]):
        self.state = state
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        per_node = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        self.layout = hashlib.sha1(repr(sorted({**layout, "per_node": per_node}.items())).encode()).hexdigest()[:10]
        self.dir = start_dir() / node_name()
        self.peer_to = (self.rank + per_node) % self.world if self.world > per_node else None
        self.peer_from = (self.rank - per_node) % self.world if self.world > per_node else None
        self.group = dist.new_group(backend="gloo")  # the copies travel on the CPU, beside the training
        self._copying: threading.Thread | None = None  # the copy in flight: at most one
        self._error: BaseException | None = None       # ... and how it failed
        # A copy that could not be written (node memory full: /dev/shm is often small in a
        # container) turns the tier off on every rank, together: (step, what failed).
        self.off: tuple[int, str] | None = None

    # ---------------------------------------------------------------- keep

    def keep(self, step: int, client: dict[str, Any]) -> None:
        """Take this rank's state of ``step`` (a copy in host memory: the loop waits for this
        only), then serialize it, write it here and send it to the peer in the background
        (``finish`` waits for that)."""
        self.finish()
        if self.off is not None:
            return
        taken = self.state.local_state(client)  # its own tensors: the loop goes on changing the model's
        # A daemon: a rank that fails mid-copy exits without waiting for a peer that never sends.
        self._copying = threading.Thread(target=self._copy, args=(step, [taken]), name="memory-tier copy", daemon=True)
        self._copying.start()

    def finish(self) -> None:
        """Wait for the copy in flight, if any: every copy of its step is written (or its
        error is raised here)."""
        copying, self._copying = self._copying, None
        if copying is not None:
            copying.join()
        error, self._error = self._error, None
        if error is not None:
            raise error

    def _copy(self, step: int, box: list[dict[str, Any]]) -> None:
        try:
            taken, buf = box.pop(), io.BytesIO()  # out of the box: the thread's arguments keep no hold on it
            torch.save(taken, buf)
            del taken  # the serialized bytes are the copy now: one state's worth of memory, not two
            mine = torch.frombuffer(buf.getbuffer(), dtype=torch.uint8)  # the bytes, not a copy of them
            failed = self._write(step, self.rank, mine)
            if self.peer_to is not None:  # sent even so: the peer waits for it
                failed = self._write(step, self.peer_from, self._swap(mine)) or failed
            said: list[str | None] = [None] * self.world  # also the barrier: the step is whole everywhere
            dist.all_gather_object(said, failed, group=self.group)  # before older ones go
            if any(said):
                self._drop(step)  # unwhole: no restart may count on it
                self.off = (step, next(filter(None, said)))
                return
            self._prune()
        except BaseException as e:  # noqa: BLE001  (raised in the loop's thread, by finish)
            self._error = e

    def _swap(self, mine: torch.Tensor) -> torch.Tensor:
        """Send ``mine`` to the next node's rank, receive the previous node's."""
        size = torch.tensor([mine.numel()], dtype=torch.int64)
        theirs = torch.zeros(1, dtype=torch.int64)
        sent = dist.isend(size, self.peer_to, group=self.group)
        dist.recv(theirs, self.peer_from, group=self.group)
        sent.wait()
        out = torch.empty(int(theirs.item()), dtype=torch.uint8)
        sent = dist.isend(mine, self.peer_to, group=self.group)
        dist.recv(out, self.peer_from, group=self.group)
        sent.wait()
        return out

    def _write(self, step: int, rank: int, data: torch.Tensor) -> str | None:
        """Write rank ``rank``'s copy of ``step``; what failed, in words, where it could not."""
        folder = self.dir / f"step_{step}-{self.layout}"
        tmp = folder / f".rank{rank}.{os.getpid()}"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            tmp.write_bytes(data.numpy())
            os.replace(tmp, folder / f"rank{rank}.pt")
            return None
        except OSError as err:
            try:
                tmp.unlink(missing_ok=True)
            except OSError:
                pass  # its folder could not be made
            try:
                free = f", {shutil.disk_usage(self.dir).free / 2**20:,.1f} MiB free there"
            except OSError:
                free = ""
            return (f"{node_name()} rank {self.rank}: {folder / f'rank{rank}.pt'}: {err.strerror or err} "
                    f"({data.numel() / 2**20:,.1f} MiB to write{free})")

    def _drop(self, step: int) -> None:
        """Every file of ``step`` this rank wrote (its own, its peer's)."""
        for held_step, rank, path in self._held():
            if held_step == step and rank in (self.rank, self.peer_from):
                path.unlink(missing_ok=True)
        try:
            (self.dir / f"step_{step}-{self.layout}").rmdir()
        except OSError:
            pass  # other ranks' files are still in it, or it was never made

    def _prune(self) -> None:
        """Drop this rank's files (its own and the one it keeps for its peer) of all but the
        KEEP newest steps."""
        old = sorted({s for s, _, _ in self._held()}, reverse=True)[KEEP:]
        for step, rank, path in self._held():
            if step in old and rank in (self.rank, self.peer_from):
                path.unlink(missing_ok=True)
                try:
                    path.parent.rmdir()
                except OSError:
                    pass  # other ranks' files are still in it

    def _held(self) -> list[tuple[int, int, Path]]:
        """(step, rank, file) of every complete file of this layout on this node."""
        out = []
        for folder in self.dir.glob(f"step_*-{self.layout}"):
            step = int(folder.name[len("step_"):].split("-")[0])
            out += [(step, int(p.stem[len("rank"):]), p) for p in folder.glob("rank*.pt")]
        return out

    # ---------------------------------------------------------------- load

    def restore(self, client: dict[str, Any], durable: int) -> tuple[int, list[int], dict[str, Any]] | None:
        """Load the newest step, newer than or as new as the durable checkpoint's
        (``durable``, -1 if none), that every rank can get; (step, the ranks whose state
        came from a peer node's copy, client state), or None where no such step is in
        memory. A collective."""
        self.finish()
        held: dict[int, set[int]] = {}
        for step, rank, _ in self._held():
            held.setdefault(step, set()).add(rank)
        everyone: list[Any] = [None] * self.world
        dist.all_gather_object(everyone, held, group=self.group)
        whole = [s for s in {s for h in everyone for s in h} if s >= durable
                 and all(any(r in h.get(s, ()) for h in everyone) for r in range(self.world))]
        if not whole:
            return None
        step = max(whole)
        saved, from_peer = None, []
        for rank in range(self.world):  # every rank walks the same plan: who sends whom what
            holder = rank if rank in everyone[rank].get(step, ()) else min(
                h for h in range(self.world) if rank in everyone[h].get(step, ()))
            from_peer += [rank] if holder != rank else []
            if holder == rank == self.rank:
                saved = torch.load(self._file(step, rank), weights_only=False)
            elif self.rank == holder:
                self._send(self._read(self._file(step, rank)), rank)
            elif self.rank == rank:
                saved = torch.load(io.BytesIO(self._recv(holder).numpy()), weights_only=False)
        client = self.state.load_local(saved, client)
        dist.barrier(group=self.group)
        return step, from_peer, client

    def _file(self, step: int, rank: int) -> Path:
        return self.dir / f"step_{step}-{self.layout}" / f"rank{rank}.pt"

    @staticmethod
    def _read(path: Path) -> torch.Tensor:
        """A file's bytes, read straight into a tensor that can be sent."""
        out = torch.empty(path.stat().st_size, dtype=torch.uint8)
        view, done = memoryview(out.numpy()), 0
        with open(path, "rb", buffering=0) as f:
            while done < len(view):
                got = f.readinto(view[done:])
                if not got:
                    raise OSError(f"{path}: ended after {done} of {len(view)} bytes")
                done += got
        return out

    def _send(self, data: torch.Tensor, to: int) -> None:
        dist.send(torch.tensor([data.numel()], dtype=torch.int64), to, group=self.group)
        dist.send(data, to, group=self.group)

    def _recv(self, holder: int) -> torch.Tensor:
        size = torch.zeros(1, dtype=torch.int64)
        dist.recv(size, holder, group=self.group)
        out = torch.empty(int(size.item()), dtype=torch.uint8)
        dist.recv(out, holder, group=self.group)
        return out

    # ---------------------------------------------------------------- end

    def clear(self) -> None:
        """The run finished or stopped (a requeue starts from the durable tier): this node's
        folder goes, and the start's folder once it is empty. A collective."""
        self.finish()
        dist.barrier(group=self.group)
        if int(os.environ.get("LOCAL_RANK", "0")) == 0:
            for folder in [self.dir, *nodememory.earlier_starts()]:  # a requeued start's copies here too
                shutil.rmtree(folder, ignore_errors=True)
                try:
                    folder.parent.rmdir()
                except OSError:
                    pass  # another node's folder (nodes that share a /dev/shm: the sandbox)
