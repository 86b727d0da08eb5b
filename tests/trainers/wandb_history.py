"""The history of an offline wandb run, read from its ``run-<id>.wandb`` file, for tests that check what wandb got.

wandb ships no reader for its transaction log: the file is a 7-byte header followed by LevelDB-log records
(32 KiB blocks; each chunk a 4-byte checksum, 2-byte length and 1-byte type: full, first, middle, last) whose
payloads are ``wandb_internal_pb2.Record`` protobufs; the ``history`` ones hold the logged rows.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

HEADER_BYTES, BLOCK_BYTES, CHUNK_HEADER = 7, 32768, 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: Path) -> list[bytes]:
    data, pos, pending, out = path.read_bytes(), HEADER_BYTES, b"", []
    while pos + CHUNK_HEADER <= len(data):
        if BLOCK_BYTES - pos % BLOCK_BYTES < CHUNK_HEADER:  # a block's tail too short for a chunk is padding
            pos += BLOCK_BYTES - pos % BLOCK_BYTES
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + CHUNK_HEADER])
        chunk = data[pos + CHUNK_HEADER : pos + CHUNK_HEADER + length]
        pos += CHUNK_HEADER + length
        if kind == FULL:
            out.append(chunk)
        elif kind == FIRST:
            pending = chunk
        elif kind == MIDDLE:
            pending += chunk
        elif kind == LAST:
            out.append(pending + chunk)
        else:  # zero padding: the end of what was written
            break
    return out


def history(sync_dir: Path) -> dict[int, dict[str, float]]:
    """Step -> the metrics logged at that step, from the offline run folder ``sync_dir``."""
    from wandb.proto import wandb_internal_pb2 as pb

    rows: dict[int, dict[str, float]] = {}
    for path in sync_dir.glob("run-*.wandb"):
        for payload in records(path):
            record = pb.Record()
            record.ParseFromString(payload)
            if record.WhichOneof("record_type") != "history":
                continue
            items = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
            rows.setdefault(int(items.pop("_step", record.history.step.num)), {}).update(
                {k: v for k, v in items.items() if not k.startswith("_")}
            )
    return rows


def newest_offline_run(run_dir: Path) -> Path:
    """The offline folder under ``run_dir/wandb`` of the run that wrote last: the run id the tracker recorded
    (``wandb_run_id``: a resume keeps it, or records the fresh id it had to take), its newest folder by the
    start time in the folder's name (``offline-run-YYYYMMDD_HHMMSS-ID``). Not by file times: the service of a
    SIGKILLed trainer may still flush the killed run's file after the resumed run has finished. Folders
    without a ``run-*.wandb`` file are left out: an init that wandb refused leaves one behind."""
    from swebox.trainers.run.tracking import WANDB_ID_FILE

    run_id = (run_dir / WANDB_ID_FILE).read_text().strip()
    folders = [p for p in (run_dir / "wandb").glob(f"offline-run-*-{run_id}") if any(p.glob("run-*.wandb"))]
    assert folders, f"no offline wandb folder of run {run_id} in {run_dir / 'wandb'}"
    return max(folders, key=lambda p: p.name)
