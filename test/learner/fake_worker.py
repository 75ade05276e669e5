"""A stand-in learner worker for the TypeScript client's tests: speaks the frames of
docs/learner-protocol.md and misbehaves on request. Ops: hello (protocol from FAKE_PROTOCOL),
echo (returns its arrays, each value doubled), usage (an error of kind usage with a field),
fail (an internal error), die (prints to stderr then exits with code 3), sleep (seconds), shutdown.
It also accepts FAKE_GARBAGE=1: answers hello with bytes that are not a frame."""
import json
import os
import socket
import struct
import sys
import time

DT = {"i32": ("<i", 4), "f32": ("<f", 4), "f64": ("<d", 8), "u8": ("<B", 1)}


def recv_exact(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            sys.exit(0)
        buf += chunk
    return buf


def send(s: socket.socket, header: dict, arrays: dict) -> None:
    payload = b""
    specs = {}
    for name, (dtype, values) in arrays.items():
        payload += b"\0" * ((8 - len(payload) % 8) % 8)
        fmt, size = DT[dtype]
        specs[name] = {"dtype": dtype, "shape": [len(values)], "offset": len(payload)}
        payload += b"".join(struct.pack(fmt, v) for v in values)
    if specs:
        header["arrays"] = specs
    head = json.dumps(header).encode()
    s.sendall(struct.pack("<II", len(head), len(payload)) + head + payload)


def main() -> None:
    path = sys.argv[sys.argv.index("--connect") + 1]
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    print("fake worker connected", file=sys.stderr, flush=True)
    while True:
        h, p = struct.unpack("<II", recv_exact(s, 8))
        header = json.loads(recv_exact(s, h))
        payload = recv_exact(s, p)
        arrays = {}
        for name, spec in (header.get("arrays") or {}).items():
            fmt, size = DT[spec["dtype"]]
            n = spec["shape"][0]
            off = spec["offset"]
            arrays[name] = (spec["dtype"], [struct.unpack_from(fmt, payload, off + i * size)[0] for i in range(n)])
        rid, op = header["id"], header["op"]
        if op == "hello":
            if os.environ.get("FAKE_GARBAGE") == "1":
                s.sendall(b"\xff\xff\xff\xff\xff\xff\xff\xffnot a frame")
                continue
            send(s, {"id": rid, "ok": True, "protocol": int(os.environ.get("FAKE_PROTOCOL", "2")), "worker": "fake",
                     "torch": "-", "transformers": "-", "peft": "-", "worldSize": 1, "cuda": False}, {})
        elif op == "echo":
            out = {k: (d, [v * 2 for v in vals]) for k, (d, vals) in arrays.items()}
            send(s, {"id": rid, "ok": True, "note": header.get("note")}, out)
        elif op == "usage":
            send(s, {"id": rid, "ok": False, "error": {"kind": "usage", "message": "no config.json in /nowhere", "field": "model.torch.path"}}, {})
        elif op == "fail":
            print("Traceback (most recent call last):\nValueError: boom", file=sys.stderr, flush=True)
            send(s, {"id": rid, "ok": False, "error": {"kind": "internal", "message": "ValueError: boom"}}, {})
        elif op == "die":
            print("about to die", file=sys.stderr, flush=True)
            os._exit(3)
        elif op == "sleep":
            time.sleep(float(header.get("seconds", 1)))
            send(s, {"id": rid, "ok": True}, {})
        elif op == "shutdown":
            send(s, {"id": rid, "ok": True}, {})
            return
        else:
            send(s, {"id": rid, "ok": False, "error": {"kind": "protocol", "message": f"unknown op {op}"}}, {})


main()
