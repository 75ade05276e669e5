"""Reads back what a W&B run directory holds, without the network: the run's `run-ID.wandb` file.

That file is W&B's transaction log: a 7-byte header (":W&B", magic 0xBEE1, version 0), then
LevelDB-style log records in 32 KiB blocks (each record: uint32 CRC-32 of its type byte and data,
uint16 length, uint8 type FULL/FIRST/MIDDLE/LAST), whose payloads are `wandb_internal_pb2.Record`
protobufs: the run, its config, history rows, summary updates. `wandb sync` uploads exactly these.
The SDK no longer ships a reader of its own, so this one exists for mage's tests and checks.

  python -m mage_logging.wandb_records RUN_DIR/wandb     # JSON: every offline run found, in order
"""

from __future__ import annotations

import json
import struct
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from wandb.proto import wandb_internal_pb2 as pb

FILE_HEADER = struct.Struct("<4sHB")
IDENT, MAGIC, VERSION = b":W&B", 0xBEE1, 0
BLOCK = 32768
RECORD_HEADER = struct.Struct("<IHB")
# The generated protobuf module picks its version at import time and carries no type stubs.
Record: Any = getattr(pb, "Record")
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


class CorruptLog(Exception):
    pass


def payloads(path: Path) -> Iterator[bytes]:
    """The payloads of a .wandb file in order, each record's checksum verified."""
    data = path.read_bytes()
    if len(data) < FILE_HEADER.size or FILE_HEADER.unpack_from(data) != (IDENT, MAGIC, VERSION):
        raise CorruptLog(f"{path}: not a W&B transaction log")
    pos = FILE_HEADER.size
    pending: bytes | None = None
    while pos + RECORD_HEADER.size <= len(data):
        left_in_block = BLOCK - pos % BLOCK
        if left_in_block < RECORD_HEADER.size:
            pos += left_in_block  # the block's zero-filled tail
            continue
        checksum, length, kind = RECORD_HEADER.unpack_from(data, pos)
        start = pos + RECORD_HEADER.size
        chunk = data[start : start + length]
        if len(chunk) < length:
            return  # a torn last record (the writer was killed): everything before it stands
        if zlib.crc32(chunk, zlib.crc32(bytes([kind]))) != checksum:
            raise CorruptLog(f"{path}: checksum mismatch at byte {pos}")
        pos = start + length
        if kind == FULL:
            yield chunk
        elif kind == FIRST:
            pending = chunk
        elif kind == MIDDLE and pending is not None:
            pending += chunk
        elif kind == LAST and pending is not None:
            yield pending + chunk
            pending = None
        else:
            raise CorruptLog(f"{path}: record of type {kind} at byte {pos} out of sequence")


def item_key(item: Any) -> str:
    return str(item.key) if item.key else "/".join(item.nested_key)


def read_run(path: Path) -> dict[str, Any]:
    """One .wandb file as plain data: the run's identity, config, history rows and summary."""
    run: dict[str, Any] = {}
    config: dict[str, Any] = {}
    history: list[dict[str, Any]] = []
    summary: dict[str, Any] = {}
    for payload in payloads(path):
        record = Record()
        record.ParseFromString(payload)
        kind = record.WhichOneof("record_type")
        if kind == "run":
            r = record.run
            run = {
                "id": r.run_id,
                "project": r.project,
                "entity": r.entity,
                "name": r.display_name,
                "group": r.run_group,
            }
            config.update({item_key(i): json.loads(i.value_json) for i in r.config.update})
        elif kind == "config":
            config.update({item_key(i): json.loads(i.value_json) for i in record.config.update})
        elif kind == "history":
            history.append({item_key(i): json.loads(i.value_json) for i in record.history.item})
        elif kind == "summary":
            summary.update({item_key(i): json.loads(i.value_json) for i in record.summary.update})
    return {
        "file": str(path),
        "run": run,
        "config": config,
        "history": history,
        "summary": summary,
        "tables": logged_tables(path.parent / "files", history),
    }


def logged_tables(files_dir: Path, history: list[dict[str, Any]]) -> dict[str, Any]:
    """The W&B tables the history refers to (each is written as JSON under the run's files/)."""
    tables: dict[str, Any] = {}
    for row in history:
        for key, value in row.items():
            if key.endswith("/_type") and value == "table-file":
                name = key.removesuffix("/_type")
                tables[name] = json.loads((files_dir / str(row[f"{name}/path"])).read_text())
    return tables


def offline_runs(wandb_dir: Path) -> list[dict[str, Any]]:
    """Every run file under a `wandb/` directory, oldest first (a resumed run leaves one per process)."""
    files = sorted(wandb_dir.glob("offline-run-*/run-*.wandb")) + sorted(wandb_dir.glob("run-*/run-*.wandb"))
    return [read_run(f) for f in files]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m mage_logging.wandb_records RUN_DIR/wandb", file=sys.stderr)
        return 2
    json.dump(offline_runs(Path(argv[0])), sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
