"""Read tracking output back with the trackers' own formats, for the tests: W&B's offline
``.wandb`` files (a LevelDB-style record log of W&B's protobuf ``Record``s; wandb 0.31
ships no Python reader for it any more, only the protobuf) and TensorBoard event files
(tensorboard's own ``EventFileLoader``)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

_BLOCK = 32 * 1024
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def wandb_records(path: Path):
    """Every ``Record`` in one ``.wandb`` file: a 7-byte header (``:W&B``, magic, version),
    then 32 KiB blocks of chunks (crc32, length, type), a record split over blocks as
    FIRST/MIDDLE/LAST chunks."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = Path(path).read_bytes()
    assert data[:4] == b":W&B", f"{path}: not a W&B data file"
    pos, buf = 7, b""
    while pos + 7 <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < 7:  # a block's tail too short for a chunk header is padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0 and length == 0:
            break
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        buf = chunk if kind in (_FULL, _FIRST) else buf + chunk
        if kind in (_FULL, _LAST):
            record = pb.Record()
            record.ParseFromString(buf)
            yield record


def wandb_history(offline_dirs: list[Path]) -> tuple[set[str], list[dict]]:
    """(run ids seen, every history row in file order) over a run's offline folders."""
    ids, rows = set(), []
    for d in offline_dirs:
        for f in sorted(Path(d).glob("*.wandb")):
            for r in wandb_records(f):
                kind = r.WhichOneof("record_type")
                if kind == "run":
                    ids.add(r.run.run_id)
                elif kind == "history":
                    rows.append({i.key or "/".join(i.nested_key): json.loads(i.value_json)
                                 for i in r.history.item})
    return ids, rows


def wandb_config(offline_dirs: list[Path]) -> dict:
    """The run's config keys as the last start recorded them (key -> decoded value)."""
    out: dict = {}
    for d in offline_dirs:
        for f in sorted(Path(d).glob("*.wandb")):
            for r in wandb_records(f):
                kind = r.WhichOneof("record_type")
                items = r.run.config.update if kind == "run" else r.config.update if kind == "config" else []
                for i in items:
                    out[i.key] = json.loads(i.value_json)
    return out


def tensorboard_scalars(logdir: Path, tag: str) -> list[int]:
    """The steps of ``tag``'s scalar values over every event file in ``logdir``, files in
    the order they were written (a name holds the second only)."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    files = []
    for f in Path(logdir).glob("events.out.tfevents.*"):
        events = list(EventFileLoader(str(f)).Load())
        files.append((events[0].wall_time if events else 0.0, events))
    steps = []
    for _, events in sorted(files, key=lambda t: t[0]):  # by each file's first wall time
        for event in events:
            for value in event.summary.value:
                if value.tag == tag:
                    steps.append(event.step)
    return steps
