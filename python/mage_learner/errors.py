"""The worker's error kinds, as the protocol names them (docs/learner-protocol.md)."""

from __future__ import annotations

from typing import Literal

ErrorKind = Literal["usage", "protocol", "internal"]


class WorkerError(Exception):
    """An error that goes on the wire as `ok: false` with this kind, message and field."""

    def __init__(self, kind: ErrorKind, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.kind: ErrorKind = kind
        self.message = message
        self.field = field

    def to_json(self) -> dict[str, str]:
        out = {"kind": self.kind, "message": self.message}
        if self.field is not None:
            out["field"] = self.field
        return out


def usage(message: str, field: str | None = None) -> WorkerError:
    return WorkerError("usage", message, field)


def protocol(message: str) -> WorkerError:
    return WorkerError("protocol", message)
