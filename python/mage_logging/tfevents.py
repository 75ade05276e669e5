"""Reads TensorBoard event files back with the tensorboard package, for mage's tests and checks.

  python -m mage_logging.tfevents LOGDIR      # JSON of every event file under LOGDIR

Two views of each run folder: every scalar event as written (`RawEventFileLoader` records parsed
as `event_pb2.Event`, so a step written twice shows twice; the records' lengths plus their 16
framing bytes must add up to the file's size, so a bad checksum, which the loader answers by
stopping, cannot go unnoticed), and what TensorBoard's `EventAccumulator` makes of the folder (its
scalar tags and (step, value) series).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from tensorboard.backend.event_processing import event_accumulator
from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
from tensorboard.compat.proto import event_pb2

FRAMING_BYTES = 16  # uint64 length, its masked CRC, the data's masked CRC


class UnreadEvents(Exception):
    pass


def read_events(path: Path) -> list[event_pb2.Event]:
    events: list[event_pb2.Event] = []
    consumed = 0
    for raw in RawEventFileLoader(str(path)).Load():
        consumed += len(raw) + FRAMING_BYTES
        event = event_pb2.Event()
        event.ParseFromString(raw)
        events.append(event)
    size = path.stat().st_size
    if consumed != size:
        raise UnreadEvents(f"{path}: read {consumed} of {size} bytes (a bad checksum or a torn record)")
    return events


def scalar_rows(path: Path) -> tuple[list[str], list[dict[str, Any]]]:
    """The file's version strings and its scalar values, one row per (event, value)."""
    versions: list[str] = []
    rows: list[dict[str, Any]] = []
    for event in read_events(path):
        if event.HasField("file_version"):
            versions.append(event.file_version)
        for value in event.summary.value:
            if value.WhichOneof("value") == "simple_value":
                rows.append(
                    {"tag": value.tag, "step": event.step, "value": value.simple_value, "wall_time": event.wall_time}
                )
    return versions, rows


def accumulated(run_dir: Path) -> dict[str, list[list[float]]]:
    """What TensorBoard's EventAccumulator serves for the folder: tag → [[step, value], ...]."""
    acc = event_accumulator.EventAccumulator(str(run_dir), size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    return {tag: [[s.step, s.value] for s in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def read_logdir(logdir: Path) -> dict[str, Any]:
    """Every folder under `logdir` that holds event files, keyed by its path relative to `logdir`."""
    runs: dict[str, Any] = {}
    folders = sorted({f.parent for f in logdir.rglob("*tfevents*") if f.is_file()})
    for folder in folders:
        files = sorted(f for f in folder.iterdir() if f.is_file() and "tfevents" in f.name)
        versions: list[str] = []
        rows: list[dict[str, Any]] = []
        for f in files:
            v, r = scalar_rows(f)
            versions += v
            rows += r
        runs[str(folder.relative_to(logdir))] = {
            "files": [f.name for f in files],
            "file_versions": versions,
            "scalars": rows,
            "accumulator": accumulated(folder),
        }
    return runs


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m mage_logging.tfevents LOGDIR", file=sys.stderr)
        return 2
    json.dump(read_logdir(Path(argv[0])), sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
