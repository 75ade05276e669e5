"""Recorded protocol sessions: a fixed script of requests against a tiny random model (built from a
config with a fixed seed, no weights committed), recorded with the replies the worker gave, and
replayed against a worker to check it still answers the same. This makes the worker testable on a
machine without Node (the GPU machine):

    python -m mage_learner.session record --out tests/data/session-v2.json
    python -m mage_learner.session replay tests/data/session-v2.json [--device cuda]
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from . import PROTOCOL_VERSION
from .client import Client
from .frames import DTYPES, NAMES, Array

MODEL = "$MODEL"
OUT = "$OUT"
# Reply fields that legitimately differ between machines: timings and library versions.
VOLATILE = {"ms", "handleMs", "peakRssBytes", "prefix", "torch", "transformers", "peft", "cuda", "worker"}


def script() -> list[tuple[dict[str, Any], dict[str, Array]]]:
    """The session: every op once or more, on a tiny Llama with a ChatML template."""
    conv = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Play tic-tac-toe: mark X at row 1 column 2."},
    ]
    rng = np.random.default_rng(0)
    rows = [rng.integers(3, 300, size=n).astype(np.int32) for n in (9, 12, 7)]
    ids = np.concatenate(rows)
    lengths = np.asarray([len(r) for r in rows], np.int32)
    mask = np.concatenate([np.r_[np.zeros(2, np.uint8), np.ones(len(r) - 2, np.uint8)] for r in rows])
    n = int(mask.sum())
    upd = {
        "ids": ids,
        "lengths": lengths,
        "loss_mask": mask,
        "old_logp": np.full(n, -5.7) + rng.normal(0, 0.3, n),
        "advantages": rng.normal(0, 1, n),
        "ref_logp": np.full(n, -5.75),
    }
    loss = {"clipLow": 0.2, "clipHigh": 0.28, "dualClip": 3, "entropyCoef": 0.01, "klCoef": 0.05, "klClamp": 10}
    load = {
        "model": MODEL,
        "dtype": "float32",
        "device": "cpu",
        "lora": None,
        "gradientCheckpointing": False,
        "optimizer": {"lr": 1e-3, "weightDecay": 0.01, "betas": [0.9, 0.999], "eps": 1e-8, "gradClip": 1.0},
        "seed": 0,
        "reference": True,
    }
    lora = {"rank": 4, "alpha": 8, "dropout": 0.0, "targetModules": ["q_proj", "v_proj"]}
    sample = {"maxNewTokens": 6, "temperature": 1.0, "topP": 1.0, "topK": 0, "seed": 3, "stop": []}
    first = {"ids": rows[0], "lengths": lengths[:1]}
    return [
        ({"op": "hello", "protocol": PROTOCOL_VERSION}, {}),
        ({"op": "hello", "protocol": PROTOCOL_VERSION + 1}, {}),
        ({"op": "load", **load, "model": OUT + "/missing"}, {}),
        ({"op": "load", **load}, {}),
        ({"op": "render", "conversations": [{"messages": conv, "addGenerationPrompt": True}]}, {}),
        (
            {"op": "generate", "requests": [{"maxNewTokens": 6, "temperature": 1.0, "topP": 0.95, "topK": 50, "seed": 7, "stop": []},
                                            {"maxNewTokens": 4, "temperature": 0.0, "topP": 1.0, "topK": 0, "seed": 1, "stop": []}]},
            {"ids": np.concatenate([rows[0], rows[1]]), "lengths": lengths[:2]},
        ),
        ({"op": "logprobs", "model": "policy"}, {k: upd[k] for k in ("ids", "lengths", "loss_mask")}),
        ({"op": "update", "loss": loss, "microBatchTokens": 16, "lr": 1e-3}, upd),
        ({"op": "logprobs", "model": "reference"}, {k: upd[k] for k in ("ids", "lengths", "loss_mask")}),
        ({"op": "save", "path": OUT + "/ck"}, {}),
        ({"op": "update", "loss": loss, "lr": 1e-3}, upd),
        ({"op": "restore", "path": OUT + "/ck"}, {}),
        ({"op": "update", "loss": loss, "lr": 1e-3}, upd),
        ({"op": "logprobs"}, {k: upd[k] for k in ("ids", "lengths", "loss_mask")}),
        # A LoRA policy and a league snapshot of it: the adapter saved, then sampled after an update.
        ({"op": "load", **load, "lora": lora, "maxAdapters": 2}, {}),
        ({"op": "update", "loss": loss, "lr": 1e-2}, upd),
        ({"op": "save_adapter", "path": OUT + "/snapshot"}, {}),
        ({"op": "update", "loss": loss, "lr": 1e-2}, upd),
        ({"op": "generate", "requests": [sample], "adapter": OUT + "/snapshot"}, first),
        ({"op": "generate", "requests": [sample]}, first),
        ({"op": "generate", "requests": [sample], "adapter": OUT + "/missing"}, first),
        ({"op": "shutdown"}, {}),
    ]


def _subst(v: Any, subs: dict[str, str]) -> Any:
    if isinstance(v, str):
        for k, x in subs.items():
            v = v.replace(k, x)
        return v
    if isinstance(v, dict):
        return {k: _subst(x, subs) for k, x in v.items()}
    if isinstance(v, list):
        return [_subst(x, subs) for x in v]
    return v


def arrays_to_json(arrays: dict[str, Array]) -> dict[str, Any]:
    out = {}
    for k, a in arrays.items():
        a = np.ascontiguousarray(a)
        out[k] = {"dtype": NAMES[a.dtype], "shape": list(a.shape), "b64": base64.b64encode(a.tobytes()).decode()}
    return out


def arrays_from_json(o: dict[str, Any]) -> dict[str, Array]:
    return {
        k: np.frombuffer(base64.b64decode(v["b64"]), dtype=DTYPES[v["dtype"]]).reshape(v["shape"]).copy()
        for k, v in o.items()
    }


class InProcess:
    """A Worker in this process behind the same frame codec (no socket, no second interpreter)."""

    def __init__(self) -> None:
        from .worker import Worker

        self.worker = Worker()
        self.next_id = 1

    def raw(self, header: dict[str, Any], arrays: dict[str, Array] | None = None) -> tuple[dict[str, Any], dict[str, Array]]:
        import io

        from .frames import encode, read_frame

        frame = read_frame(io.BytesIO(encode({"id": self.next_id, **header}, arrays)))
        self.next_id += 1
        assert frame is not None
        reply = read_frame(io.BytesIO(encode(*self.worker.handle(frame))))
        assert reply is not None
        return reply.header, reply.arrays


def run(client: Client | InProcess, requests: list[tuple[dict[str, Any], dict[str, Array]]], subs: dict[str, str]) -> list[tuple[dict[str, Any], dict[str, Array]]]:
    replies = []
    for header, arrays in requests:
        h, a = client.raw(_subst(header, subs), arrays)
        # Paths back to placeholders, the longest first (the model lies inside the output folder).
        back = {v: k for k, v in sorted(subs.items(), key=lambda kv: -len(kv[1]))}
        replies.append((_subst(h, back), a))
    return replies


def record(out: Path) -> None:
    from .tiny import build_model

    with tempfile.TemporaryDirectory() as tmp:
        model = build_model(Path(tmp) / "model", "llama", seed=0)
        reqs = script()
        with Client() as c:
            replies = run(c, reqs, {MODEL: str(model), OUT: tmp})
    doc = {
        "protocol": PROTOCOL_VERSION,
        "model": {"builder": "mage_learner.tiny.build_model", "arch": "llama", "seed": 0},
        "exchanges": [
            {"request": {"header": h, "arrays": arrays_to_json(a)}, "reply": {"header": rh, "arrays": arrays_to_json(ra)}}
            for (h, a), (rh, ra) in zip(reqs, replies)
        ],
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")


def compare(want: Any, got: Any, where: str, tol: float, loose: bool) -> list[str]:
    """Differences between a recorded and a replayed reply header (floats within tol)."""
    if isinstance(want, dict) and isinstance(got, dict):
        diffs = []
        # Volatile fields are informational (timings, memory, versions): a recording may predate one.
        if set(want) - VOLATILE != set(got) - VOLATILE:
            diffs.append(f"{where}: keys {sorted(want)} != {sorted(got)}")
        for k in set(want) & set(got):
            if k not in VOLATILE:
                diffs += compare(want[k], got[k], f"{where}.{k}", tol, loose)
        return diffs
    if isinstance(want, list) and isinstance(got, list):
        if loose and where.endswith(("texts", "finish")):
            return [] if len(want) == len(got) else [f"{where}: {len(want)} != {len(got)} entries"]
        if len(want) != len(got):
            return [f"{where}: length {len(want)} != {len(got)}"]
        return [d for i, (w, g) in enumerate(zip(want, got)) for d in compare(w, g, f"{where}[{i}]", tol, loose)]
    if isinstance(want, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        if loose:
            return []
        return [] if abs(want - got) <= tol * max(1.0, abs(want)) else [f"{where}: {want} != {got}"]
    if loose and where.endswith(("message", "gradNorm", "loss", "clipped", "step")):
        return []
    return [] if want == got else [f"{where}: {want!r} != {got!r}"]


def replay(doc: dict[str, Any], device: str = "cpu", tol: float = 1e-5, in_process: bool = False) -> list[str]:
    """Replays a recording; returns the differences (none: the worker answers as recorded). On a
    device other than the recording's CPU float32 (e.g. CUDA bfloat16) only the structure is
    compared: which requests succeed, the reply fields, array names and dtypes."""
    from .tiny import build_model

    loose = device != "cpu"
    diffs: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        model = build_model(Path(tmp) / "model", doc["model"]["arch"], seed=doc["model"]["seed"])
        reqs = []
        for ex in doc["exchanges"]:
            h = dict(ex["request"]["header"])
            if h.get("op") == "load" and loose:
                h.update(device=device, dtype="bfloat16")
            reqs.append((h, arrays_from_json(ex["request"]["arrays"])))
        if in_process:
            got = run(InProcess(), reqs, {MODEL: str(model), OUT: tmp})
        else:
            with Client() as c:
                got = run(c, reqs, {MODEL: str(model), OUT: tmp})
        for i, (ex, (gh, ga)) in enumerate(zip(doc["exchanges"], got)):
            op = ex["request"]["header"].get("op")
            where = f"#{i} {op}"
            wh = ex["reply"]["header"]
            wa = arrays_from_json(ex["reply"]["arrays"])
            diffs += compare(wh, gh, where, tol, loose)
            if set(wa) != set(ga):
                diffs.append(f"{where}: arrays {sorted(wa)} != {sorted(ga)}")
                continue
            for k in wa:
                w, g = wa[k], ga[k]
                if w.dtype != g.dtype:
                    diffs.append(f"{where}.{k}: dtype {w.dtype} != {g.dtype}")
                elif loose:
                    continue
                elif w.shape != g.shape:
                    diffs.append(f"{where}.{k}: shape {w.shape} != {g.shape}")
                elif w.dtype.kind == "f":
                    worst = float(np.abs(w - g).max()) if w.size else 0.0
                    if worst > tol:
                        diffs.append(f"{where}.{k}: max difference {worst:.3g} > {tol}")
                elif not np.array_equal(w, g):
                    diffs.append(f"{where}.{k}: {w.tolist()[:8]} != {g.tolist()[:8]}")
    return diffs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mage_learner.session", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("--out", required=True, type=Path)
    p = sub.add_parser("replay")
    p.add_argument("file", type=Path)
    p.add_argument("--device", default="cpu")
    args = ap.parse_args(argv)
    if args.cmd == "record":
        record(args.out)
        print(f"recorded {args.out}")
        return 0
    diffs = replay(json.loads(args.file.read_text()), args.device)
    for d in diffs:
        print(d)
    print(f"replay on {args.device}: {'OK' if not diffs else f'{len(diffs)} differences'}")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
