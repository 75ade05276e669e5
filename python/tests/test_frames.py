"""Frames: arrays of every dtype round-trip at 8-byte-aligned offsets; malformed frames are
protocol errors."""

from __future__ import annotations

import io
import json
import struct

import numpy as np
import pytest

from mage_learner.errors import WorkerError
from mage_learner.frames import Array, decode, encode, read_frame


def test_round_trip_every_dtype_aligned() -> None:
    arrays: dict[str, Array] = {
        "ids": np.arange(7, dtype=np.int32) - 3,
        "w": np.linspace(-1, 1, 5, dtype=np.float32).reshape(5),
        "x": np.array([[1.5, -2.25, np.pi], [0, 1e-300, -7]], dtype=np.float64),
        "m": np.array([0, 1, 1], dtype=np.uint8),
        "empty": np.zeros(0, np.int32),
    }
    raw = encode({"id": 3, "op": "x", "text": "é✓"}, arrays)
    stream = io.BytesIO(raw + raw)
    for _ in range(2):
        f = read_frame(stream)
        assert f is not None
        assert f.header == {"id": 3, "op": "x", "text": "é✓"}
        for k, v in arrays.items():
            assert f.arrays[k].dtype == v.dtype and f.arrays[k].shape == v.shape
            np.testing.assert_array_equal(f.arrays[k], v)
    assert read_frame(stream) is None
    hlen = struct.unpack("<I", raw[:4])[0]
    specs = json.loads(raw[8 : 8 + hlen])["arrays"]
    assert all(s["offset"] % 8 == 0 for s in specs.values())
    assert specs["x"]["shape"] == [2, 3]


def frame(header: dict[str, object], payload: bytes = b"") -> bytes:
    hb = json.dumps(header).encode()
    return struct.pack("<II", len(hb), len(payload)) + hb + payload


@pytest.mark.parametrize(
    "raw",
    [
        struct.pack("<II", 5, 0) + b"{nope",  # not JSON
        struct.pack("<II", 2, 0) + b"[]",  # not an object
        frame({"arrays": {"a": {"dtype": "i64", "shape": [1], "offset": 0}}}, b"\0" * 8),  # unknown dtype
        frame({"arrays": {"a": {"dtype": "i32", "shape": [1], "offset": 4}}}, b"\0" * 8),  # unaligned
        frame({"arrays": {"a": {"dtype": "f64", "shape": [2], "offset": 0}}}, b"\0" * 8),  # past the payload
        frame({"arrays": {"a": {"dtype": "u8", "shape": [-1], "offset": 0}}}, b"\0" * 8),  # bad shape
        struct.pack("<II", 100, 0) + b"{}",  # the stream ends inside the header
        b"\x01\x00",  # the stream ends inside the length prefix
    ],
)
def test_malformed_frames_are_protocol_errors(raw: bytes) -> None:
    with pytest.raises(WorkerError) as e:
        read_frame(io.BytesIO(raw))
    assert e.value.kind == "protocol"
    assert "malformed frame" in e.value.message


def test_decode_rejects_bad_utf8() -> None:
    with pytest.raises(WorkerError) as e:
        decode(b"\xff\xfe", b"")
    assert e.value.kind == "protocol"
