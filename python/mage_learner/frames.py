"""Frame encoding: 4-byte header length, 4-byte payload length (both u32 little-endian), a JSON
header, then a payload of 8-byte-aligned little-endian arrays the header's `arrays` describes."""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Protocol

import numpy as np
import numpy.typing as npt

from .errors import protocol

DTYPES: dict[str, np.dtype[Any]] = {
    "i32": np.dtype("<i4"),
    "f32": np.dtype("<f4"),
    "f64": np.dtype("<f8"),
    "u8": np.dtype("u1"),
}
NAMES = {v: k for k, v in DTYPES.items()}
# Generous caps that catch garbage lengths before allocating: 64 MiB of header, 8 GiB of payload.
MAX_HEADER = 64 << 20
MAX_PAYLOAD = 8 << 30

Array = npt.NDArray[Any]


@dataclass
class Frame:
    header: dict[str, Any]
    arrays: dict[str, Array] = field(default_factory=dict)


class Reader(Protocol):
    def read(self, n: int, /) -> bytes: ...


def _align8(n: int) -> int:
    return (n + 7) & ~7


def finite_json(v: Any) -> Any:
    """JSON has no NaN or infinity: non-finite floats travel as null."""
    if isinstance(v, float):
        return v if v == v and v not in (float("inf"), float("-inf")) else None
    if isinstance(v, dict):
        return {k: finite_json(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [finite_json(x) for x in v]
    return v


def encode(header: dict[str, Any], arrays: dict[str, Array] | None = None) -> bytes:
    """One frame's bytes. Arrays are converted to their protocol dtype's little-endian layout."""
    specs: dict[str, Any] = {}
    chunks: list[bytes] = []
    offset = 0
    for name, arr in (arrays or {}).items():
        a = np.asarray(arr)
        dt = a.dtype.newbyteorder("<") if a.dtype.byteorder == ">" else a.dtype
        if dt not in NAMES:
            raise TypeError(f"array {name!r}: dtype {a.dtype} is not one of i32/f32/f64/u8")
        data = np.ascontiguousarray(a, dtype=dt).tobytes()
        specs[name] = {"dtype": NAMES[dt], "shape": list(a.shape), "offset": offset}
        pad = _align8(len(data)) - len(data)
        chunks.append(data + b"\0" * pad)
        offset += len(data) + pad
    h = dict(header)
    if specs:
        h["arrays"] = specs
    else:
        h.pop("arrays", None)
    hb = json.dumps(finite_json(h), separators=(",", ":"), allow_nan=False).encode("utf-8")
    payload = b"".join(chunks)
    return struct.pack("<II", len(hb), len(payload)) + hb + payload


def _read_exact(stream: Reader, n: int, what: str, allow_eof: bool = False) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = stream.read(n - len(buf))
        if not chunk:
            if allow_eof and not buf:
                return None
            raise protocol(f"malformed frame: the stream ended inside the {what} ({len(buf)} of {n} bytes)")
        buf += chunk
    return bytes(buf)


def decode(header_bytes: bytes, payload: bytes) -> Frame:
    """Parses a header and payload; malformed input raises a protocol WorkerError."""
    try:
        header = json.loads(header_bytes.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise protocol(f"malformed frame: the header is not UTF-8 JSON ({e})") from None
    if not isinstance(header, dict):
        raise protocol("malformed frame: the header is not a JSON object")
    arrays: dict[str, Array] = {}
    specs = header.pop("arrays", None) or {}
    if not isinstance(specs, dict):
        raise protocol("malformed frame: `arrays` is not an object")
    for name, spec in specs.items():
        if not isinstance(spec, dict):
            raise protocol(f"malformed frame: array {name!r} has no description")
        dtype = DTYPES.get(spec.get("dtype"))  # type: ignore[arg-type]
        shape = spec.get("shape")
        offset = spec.get("offset")
        if dtype is None:
            raise protocol(f"malformed frame: array {name!r} has dtype {spec.get('dtype')!r}, not i32/f32/f64/u8")
        if (
            not isinstance(shape, list)
            or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
            or not isinstance(offset, int)
            or offset < 0
            or offset % 8 != 0
        ):
            raise protocol(f"malformed frame: array {name!r} has a bad shape or offset (offsets are multiples of 8)")
        count = int(np.prod(shape)) if shape else 1
        end = offset + count * dtype.itemsize
        if end > len(payload):
            raise protocol(f"malformed frame: array {name!r} runs past the payload ({end} > {len(payload)} bytes)")
        arrays[name] = np.frombuffer(payload, dtype=dtype, count=count, offset=offset).reshape(shape).copy()
    return Frame(header, arrays)


def read_frame(stream: Reader) -> Frame | None:
    """The next frame, or None at a clean end of stream (between frames)."""
    prefix = _read_exact(stream, 8, "length prefix", allow_eof=True)
    if prefix is None:
        return None
    hlen, plen = struct.unpack("<II", prefix)
    if hlen > MAX_HEADER or plen > MAX_PAYLOAD:
        raise protocol(f"malformed frame: header length {hlen} / payload length {plen} is implausible")
    hb = _read_exact(stream, hlen, "header")
    pb = _read_exact(stream, plen, "payload")
    assert hb is not None and pb is not None
    return decode(hb, pb)


def write_frame(stream: BinaryIO, header: dict[str, Any], arrays: dict[str, Array] | None = None) -> None:
    stream.write(encode(header, arrays))
    stream.flush()
