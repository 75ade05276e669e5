"""The worker process over a real Unix socket: hello and its version check, usage errors naming
the field (bad path, unknown architecture), malformed frames, and a clean shutdown."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
from helpers import load_fields
from mage_learner.tiny import unknown_architecture

from mage_learner import PROTOCOL_VERSION
from mage_learner.client import Client, WorkerFailed
from mage_learner.frames import read_frame


def test_worker_session_errors_and_shutdown(llama_dir: Path, tmp_path: Path) -> None:
    c = Client()
    try:
        h, _ = c.call("hello", protocol=PROTOCOL_VERSION)
        assert h["protocol"] == PROTOCOL_VERSION and h["worldSize"] == 1 and isinstance(h["cuda"], bool)
        for theirs, side in ((PROTOCOL_VERSION + 1, "update the Python worker"), (0, "update the TypeScript trainer")):
            with pytest.raises(WorkerFailed) as e:
                c.call("hello", protocol=theirs)
            assert e.value.error["kind"] == "protocol" and side in e.value.error["message"]
        with pytest.raises(WorkerFailed) as e:
            c.call("logprobs")
        assert e.value.error["kind"] == "protocol" and "load" in e.value.error["message"]
        with pytest.raises(WorkerFailed) as e:
            c.call("load", **load_fields(tmp_path / "missing"))
        assert e.value.error == {"kind": "usage", "field": "model.torch.path", "message": e.value.error["message"]}
        assert "does not exist" in e.value.error["message"]
        with pytest.raises(WorkerFailed) as e:
            c.call("load", **load_fields(unknown_architecture(tmp_path / "odd")))
        assert e.value.error["kind"] == "usage" and e.value.error["field"] == "model.torch.path"
        assert "Traceback" not in e.value.error["message"]
        with pytest.raises(WorkerFailed) as e:
            c.call("load", **load_fields(llama_dir, dtype="float8"))
        assert e.value.error["field"] == "model.torch.dtype"
        with pytest.raises(WorkerFailed) as e:
            c.call("frobnicate")
        assert e.value.error["kind"] == "protocol"
        # A frame whose header is not JSON: a protocol error, and the worker keeps serving.
        c.wfile.write(struct.pack("<II", 5, 0) + b"{nope")
        c.wfile.flush()
        bad = read_frame(c.rfile)
        assert bad is not None and bad.header["ok"] is False and bad.header["error"]["kind"] == "protocol"
        h, _ = c.call("load", **load_fields(llama_dir))
        assert h["architecture"] == "LlamaForCausalLM" and h["eosTokenIds"] == [2]
        assert h["trainableParameters"] == h["parameters"] > 0
        ids = np.asarray([1, 5, 6, 7], np.int32)
        _, a = c.call("logprobs", {"ids": ids, "lengths": np.asarray([4], np.int32), "loss_mask": np.asarray([0, 1, 1, 1], np.uint8)})
        assert a["logp"].dtype == np.float64 and a["logp"].shape == (3,) and (a["logp"] < 0).all()
    finally:
        rc = c.close()
    assert rc == 0
