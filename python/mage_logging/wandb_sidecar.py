"""The Weights & Biases sidecar of a `mage train` run.

W&B's SDK is Python, mage is TypeScript: the trainer starts this process only when the config asks
for W&B (`logging.wandb`) and feeds it JSON lines on stdin:

  {"op": "init", "project", "entity", "name", "group", "mode", "dir", "resume", "config"}
  {"op": "log", "kind": "train" | "eval" | ..., "step": N, "values": {key: number}}
  {"op": "final", "table": {"key", "columns", "rows"}, "summary": {key: number}}
  {"op": "finish"}

It answers on stdout with one JSON line per event: {"event": "started", ...} once the run is open,
{"event": "error", "message"} when W&B fails (after which it only drains its input, so the trainer
never blocks or breaks on a closed pipe). End of input without "finish" (the trainer was killed)
finishes the run as failed, so everything it was sent is kept.

Resume keeps one curve: `<dir>/wandb/mage-wandb.json` holds the run id and, per kind of record, the
last step logged. A resumed trainer replays its history; records at or before those steps are
skipped, so each step of each kind reaches W&B exactly once (mage's resume is deterministic, so a
replayed record equals the one logged before the interruption). A sidecar holds
`<dir>/wandb/mage-wandb.lock` while it runs, so the sidecar of a resumed trainer reads the marks only
after the killed trainer's sidecar has logged all it was sent and finished.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import string
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

STATE_FILE = "mage-wandb.json"
LOCK_FILE = "mage-wandb.lock"
LOCK_WAIT_SECONDS = 300.0


@dataclass
class Marks:
    """What this run has logged so far: the W&B run id and the last step per kind of record."""

    run_id: str
    last_step: dict[str, int] = field(default_factory=dict)
    final_logged: bool = False

    def seen(self, kind: str, step: int) -> bool:
        return step <= self.last_step.get(kind, -1)

    def top(self) -> int:
        """The highest step logged so far (W&B's steps only go up)."""
        return max(self.last_step.values(), default=0)


def new_run_id() -> str:
    """A fresh W&B run id (W&B's own form: 8 lowercase letters and digits)."""
    alphabet = string.ascii_lowercase + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(8))


def state_path(run_dir: str) -> Path:
    return Path(run_dir) / "wandb" / STATE_FILE


def take_lock(run_dir: str, wait_seconds: float = LOCK_WAIT_SECONDS) -> int:
    """Holds the run's sidecar lock (released when the process ends); waits for an earlier sidecar."""
    path = Path(run_dir) / "wandb" / LOCK_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() > deadline:
                os.close(fd)
                raise TimeoutError(f"another W&B sidecar of this run still holds {path}") from None
            time.sleep(0.05)


def read_marks(path: Path) -> Marks | None:
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(raw, dict) or not isinstance(raw.get("run_id"), str):
        return None
    last = raw.get("last_step", {})
    return Marks(
        run_id=raw["run_id"],
        last_step={str(k): int(v) for k, v in last.items()} if isinstance(last, dict) else {},
        final_logged=bool(raw.get("final_logged", False)),
    )


def write_marks(path: Path, marks: Marks) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    body = {"run_id": marks.run_id, "last_step": marks.last_step, "final_logged": marks.final_logged}
    tmp.write_text(json.dumps(body) + "\n")
    os.replace(tmp, path)


def parse_line(line: str) -> dict[str, Any] | None:
    """A message, or None for a line that is not one (a torn last line after a kill)."""
    try:
        message = json.loads(line)
    except ValueError:
        return None
    return message if isinstance(message, dict) else None


class Sidecar:
    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.run: Any = None
        self.marks: Marks | None = None
        self.state: Path | None = None
        self.failed = False
        self.finished = False

    def emit(self, event: dict[str, Any]) -> None:
        self.out.write(json.dumps(event) + "\n")
        self.out.flush()

    def fail(self, what: str, err: BaseException) -> None:
        """Reports the first failure and stops using W&B; later messages are drained."""
        if not self.failed:
            self.emit({"event": "error", "message": f"{what}: {type(err).__name__}: {err}"})
        self.failed = True
        self.run = None

    def handle(self, message: dict[str, Any]) -> None:
        op = message.get("op")
        if self.failed or self.finished:
            return
        try:
            if op == "init":
                self.init(message)
            elif op == "log":
                self.log(str(message["kind"]), int(message["step"]), dict(message["values"]))
            elif op == "final":
                self.final(dict(message["table"]), dict(message["summary"]))
            elif op == "finish":
                self.finish(0)
        except Exception as err:  # noqa: BLE001 - any W&B failure is reported, never raised
            self.fail(f"W&B {op}", err)

    def init(self, message: dict[str, Any]) -> None:
        import wandb

        run_dir = str(message["dir"])
        take_lock(run_dir)
        self.state = state_path(run_dir)
        marks = read_marks(self.state) if message.get("resume") else None
        self.marks = marks if marks is not None else Marks(run_id=new_run_id())
        write_marks(self.state, self.marks)
        self.run = wandb.init(
            project=message["project"],
            entity=message.get("entity"),
            name=message.get("name"),
            group=message.get("group"),
            mode=message["mode"],
            dir=run_dir,
            id=self.marks.run_id,
            resume="allow",
            config=message.get("config"),
            settings=wandb.Settings(console="off", silent=True),
        )
        self.emit(
            {
                "event": "started",
                "id": self.run.id,
                "mode": message["mode"],
                "dir": str(Path(self.run.dir).parent),
                "url": self.run.url,
            }
        )

    def log(self, kind: str, step: int, values: dict[str, Any]) -> None:
        if self.run is None or self.marks is None or self.state is None or self.marks.seen(kind, step):
            return
        if step < self.marks.top():
            return  # W&B drops a step below one already logged; the marks must not claim it
        self.run.log(values, step=step)
        self.marks.last_step[kind] = step
        write_marks(self.state, self.marks)

    def final(self, table: dict[str, Any], summary: dict[str, Any]) -> None:
        if self.run is None or self.marks is None or self.state is None or self.marks.final_logged:
            return
        import wandb

        rows = [list(r) for r in table["rows"]]
        table_value = wandb.Table(columns=list(table["columns"]), data=rows)
        # Committing the last row first keeps W&B from overwriting the summary with it afterwards.
        self.run.log({str(table["key"]): table_value}, step=self.marks.top(), commit=True)
        self.run.summary.update(summary)
        self.marks.final_logged = True
        write_marks(self.state, self.marks)

    def finish(self, exit_code: int) -> None:
        if self.finished:
            return
        self.finished = True
        if self.run is not None:
            try:
                self.run.finish(exit_code=exit_code)
            except Exception as err:  # noqa: BLE001
                self.fail("W&B finish", err)


def serve(lines: TextIO, out: TextIO) -> None:
    sidecar = Sidecar(out)
    for line in lines:
        message = parse_line(line)
        if message is not None:
            sidecar.handle(message)
    # End of input without "finish": the trainer is gone; keep what was logged, marked as failed.
    sidecar.finish(1)


def main() -> int:
    serve(sys.stdin, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
