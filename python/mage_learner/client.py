"""A small client of the learner protocol: listens on a Unix socket, starts a worker that connects
to it, and sends requests. Used by the tests and the recorded-session tools."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from .frames import Array, read_frame, write_frame


class WorkerFailed(Exception):
    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(f"{error.get('kind')}: {error.get('message')}")
        self.error = error


class Client:
    def __init__(self, command: list[str] | None = None, env: dict[str, str] | None = None, timeout: float = 120.0) -> None:
        """Starts `command + ['--connect', PATH]` (default: this interpreter's worker module)."""
        self.dir = tempfile.mkdtemp(prefix="mage-learner-")
        self.path = os.path.join(self.dir, "worker.sock")
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(self.path)
        self.server.listen(1)
        self.server.settimeout(timeout)
        cmd = (command or [sys.executable, "-m", "mage_learner.worker"]) + ["--connect", self.path]
        pkg_root = str(Path(__file__).resolve().parents[1])
        full_env = {**os.environ, **(env or {})}
        full_env["PYTHONPATH"] = pkg_root + os.pathsep + full_env.get("PYTHONPATH", "")
        # stderr goes to a file (a pipe nobody reads would fill up and block the worker).
        self.stderr_path = os.path.join(self.dir, "stderr.log")
        self.stderr = open(self.stderr_path, "w")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(cmd, env=full_env, stderr=self.stderr, stdout=self.stderr)
        try:
            self.conn, _ = self.server.accept()
        except TimeoutError:
            self.proc.kill()
            raise RuntimeError(f"the worker did not connect:\n{self.stderr_tail()}") from None
        self.conn.settimeout(timeout)
        self.rfile = self.conn.makefile("rb")
        self.wfile = self.conn.makefile("wb")
        self.next_id = 1

    def stderr_tail(self, lines: int = 40) -> str:
        try:
            with open(self.stderr_path) as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    def exit_note(self) -> str:
        """The worker's exit status and last output, once it has gone (for errors that say why)."""
        try:
            rc = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return " (the worker is still running)"
        self.stderr.flush()
        return f" (exit status {rc}); its last output:\n{self.stderr_tail()}"

    def raw(self, header: dict[str, Any], arrays: dict[str, Array] | None = None) -> tuple[dict[str, Any], dict[str, Array]]:
        h = {"id": self.next_id, **header}
        self.next_id += 1
        try:
            write_frame(self.wfile, h, arrays)
            frame = read_frame(self.rfile)
        except (ConnectionResetError, BrokenPipeError) as err:
            raise EOFError(f"the worker closed the connection{self.exit_note()}") from err
        if frame is None:
            raise EOFError(f"the worker closed the connection{self.exit_note()}")
        return frame.header, frame.arrays

    def call(self, op: str, arrays: dict[str, Array] | None = None, **fields: Any) -> tuple[dict[str, Any], dict[str, Array]]:
        header, out = self.raw({"op": op, **fields}, arrays)
        if not header.get("ok"):
            raise WorkerFailed(header.get("error") or {})
        return header, out

    def close(self) -> int:
        try:
            if self.proc.poll() is None:
                try:
                    self.call("shutdown")
                except (OSError, EOFError, WorkerFailed):
                    pass
            try:
                rc = self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                rc = self.proc.wait()
        finally:
            for f in (self.rfile, self.wfile):
                try:
                    f.close()
                except OSError:
                    pass
            self.conn.close()
            self.server.close()
            self.stderr.close()
            shutil.rmtree(self.dir, ignore_errors=True)
        return rc

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
