"""torchrun --nproc-per-node 2 (gloo, CPU, PyTorch FSDP FULL_SHARD) gives the same log-probs and
the same update as one process, full fine-tuning and LoRA; save/restore under FSDP resume exactly."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from helpers import call, load_fields, loaded_worker, weights
from test_update import LOSS, ppo_batch

from mage_learner import PROTOCOL_VERSION
from mage_learner.client import Client

LORA = {"rank": 4, "alpha": 8, "dropout": 0.0, "targetModules": ["q_proj", "v_proj"]}
OPT = {"lr": 1e-3, "weightDecay": 0.01, "betas": [0.9, 0.999], "eps": 1e-8, "gradClip": 1.0}


def torchrun() -> list[str]:
    exe = shutil.which("torchrun", path=os.path.dirname(sys.executable))
    return [exe] if exe else [sys.executable, "-m", "torch.distributed.run"]


def test_two_ranks_equal_one_process(llama_dir: Path, tmp_path: Path) -> None:
    one = loaded_worker(llama_dir, optimizer=OPT, lora=None)
    b = ppo_batch(one, 20, n=5)
    b.pop("ref_logp")
    loss = {**LOSS, "klCoef": 0}
    _, lp1 = call(one, "logprobs", b)
    h1, _ = call(one, "update", b, loss=loss, lr=1e-3, microBatchTokens=16)

    cmd = torchrun() + ["--standalone", "--nproc-per-node", "2", "-m", "mage_learner.worker"]
    env = {"MAGE_DIST_BACKEND": "gloo", "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
    with Client(cmd, env=env, timeout=240) as c:
        hello, _ = c.call("hello", protocol=PROTOCOL_VERSION)
        assert hello["worldSize"] == 2
        h, _ = c.call("load", **load_fields(llama_dir, optimizer=OPT, reference=True))
        assert one.loaded is not None
        assert h["parameters"] == sum(p.numel() for p in one.loaded.model.parameters())
        _, lp2 = c.call("logprobs", {k: b[k] for k in ("ids", "lengths", "loss_mask")})
        h2, _ = c.call("update", b, loss=loss, lr=1e-3, microBatchTokens=16)
        # Full fine-tuning's frozen reference, sharded like the policy: still the starting weights.
        _, ref2 = c.call("logprobs", {k: b[k] for k in ("ids", "lengths", "loss_mask")}, model="reference")
        gen, ga = c.call("generate", {"ids": np.asarray([1, 5, 6], np.int32), "lengths": np.asarray([3], np.int32)},
                         requests=[{"maxNewTokens": 5, "temperature": 1.0, "topP": 1.0, "topK": 0, "seed": 1}])
        c.call("save", path=str(tmp_path / "ck"))
        # Resume under FSDP: restore the sharded model and optimizer, then the same update again.
        # Two updates each time: the second is the first whose loss depends on the restored Adam moments.
        h3 = [c.call("update", b, loss=loss, lr=1e-3)[0] for _ in range(2)]
        assert c.call("restore", path=str(tmp_path / "ck"))[0]["step"] == 1
        h4 = [c.call("update", b, loss=loss, lr=1e-3)[0] for _ in range(2)]
        assert [(h["loss"], h["gradNorm"], h["step"]) for h in h4] == [(h["loss"], h["gradNorm"], h["step"]) for h in h3]
        assert [h["step"] for h in h4] == [2, 3]
        # LoRA under FSDP, in the same ranks: the same update as one process, its adapter saved in
        # peft's layout, and a restore that repeats the next update exactly.
        c.call("load", **load_fields(llama_dir, optimizer=OPT, lora=LORA))
        hl2, _ = c.call("update", b, loss=loss, lr=1e-2)
        c.call("save", path=str(tmp_path / "adapter"))
        hl3 = [c.call("update", b, loss=loss, lr=1e-2)[0] for _ in range(2)]
        c.call("restore", path=str(tmp_path / "adapter"))
        hl4 = [c.call("update", b, loss=loss, lr=1e-2)[0] for _ in range(2)]
        assert [(h["loss"], h["gradNorm"]) for h in hl4] == [(h["loss"], h["gradNorm"]) for h in hl3]
    lo = loaded_worker(llama_dir, optimizer=OPT, lora=LORA)
    hl1, _ = call(lo, "update", b, loss=loss, lr=1e-2)
    assert hl2["loss"] == pytest.approx(hl1["loss"], rel=1e-5)
    assert hl2["gradNorm"] == pytest.approx(hl1["gradNorm"], rel=1e-5)
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from mage_learner.batch import split_sequences
    from mage_learner.learner import score

    base = AutoModelForCausalLM.from_pretrained(str(llama_dir), local_files_only=True, dtype=torch.float32)
    fresh = PeftModel.from_pretrained(base, str(tmp_path / "adapter")).eval()
    _, lo_lp = call(lo, "logprobs", b)
    with torch.no_grad():
        got, _ = score(fresh, split_sequences(b), torch.device("cpu"))
    assert float(np.abs(got.double().numpy() - lo_lp["logp"]).max()) < 1e-5
    np.testing.assert_allclose(lp2["logp"], lp1["logp"], rtol=0, atol=1e-5)
    np.testing.assert_allclose(ref2["logp"], lp1["logp"], rtol=0, atol=1e-5)
    assert float(np.abs(ref2["logp"] - call(one, "logprobs", b)[1]["logp"]).max()) > 1e-4, "the policy moved"
    assert h2["loss"] == pytest.approx(h1["loss"], rel=1e-5)
    assert h2["gradNorm"] == pytest.approx(h1["gradNorm"], rel=1e-5)
    assert ga["tokens"].size == 5
    saved = AutoModelForCausalLM.from_pretrained(str(tmp_path / "ck"), local_files_only=True, dtype=torch.float32)
    w2 = {n: p.detach().numpy() for n, p in saved.named_parameters()}
    w1 = weights(one)
    worst = max(float(np.abs(w1[k] - w2[k]).max()) for k in w1)
    print(f"fsdp 2 ranks vs 1: logp {np.abs(lp2['logp'] - lp1['logp']).max():.2e}, loss {abs(h2['loss'] - h1['loss']):.2e}, weights {worst:.2e}")
    assert worst < 1e-5, worst


def children_of(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # Field 4 (after the parenthesised command, which may hold spaces) is the parent pid.
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            out.append(int(entry.name))
    return out


def test_ranks_exit_when_the_launcher_is_killed() -> None:
    import signal
    import time

    cmd = torchrun() + ["--standalone", "--nproc-per-node", "2", "-m", "mage_learner.worker"]
    env = {"MAGE_DIST_BACKEND": "gloo", "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
    c = Client(cmd, env=env, timeout=240)
    try:
        assert c.call("hello", protocol=PROTOCOL_VERSION)[0]["worldSize"] == 2
        ranks = children_of(c.proc.pid)
        assert len(ranks) == 2, ranks
        os.kill(c.proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + 15
        alive = ranks
        while alive and time.monotonic() < deadline:
            time.sleep(0.2)
            alive = [r for r in ranks if Path(f"/proc/{r}").exists() and "Z" not in (Path(f"/proc/{r}/stat").read_text().rsplit(")", 1)[1].split()[0])]
        assert alive == [], f"ranks {alive} outlived their killed launcher"
    finally:
        c.close()


def test_full_state_is_offloaded_only_from_another_device() -> None:
    from mage_learner.fsdp import offload_to_cpu

    assert offload_to_cpu(torch.nn.Linear(2, 2)) is False
    assert offload_to_cpu(torch.nn.Linear(2, 2, device="meta")) is True


@pytest.mark.parametrize("lora", [LORA, None], ids=["lora", "full"])
def test_checkpoints_move_between_one_process_and_two_ranks(llama_dir: Path, tmp_path: Path, lora: dict[str, Any] | None) -> None:
    """A checkpoint saved by one process resumes under two ranks and one saved under two ranks in
    one process: the next two updates are those the saving side would have made (rounding aside).
    The second one's loss is taken at weights the restored optimizer moments moved."""
    one = loaded_worker(llama_dir, optimizer=OPT, lora=lora)
    b = ppo_batch(one, 20, n=5)
    b.pop("ref_logp")
    loss = {**LOSS, "klCoef": 0}

    def two_updates(run: Any) -> list[dict[str, Any]]:
        return [run("update", b, loss=loss, lr=1e-2)[0] for _ in range(2)]

    call(one, "update", b, loss=loss, lr=1e-2)
    call(one, "save", path=str(tmp_path / "one"))
    # The layout one process wrote before optimizer states were named: the numbered state_dict().
    shutil.copytree(tmp_path / "one", tmp_path / "numbered")
    assert one.learner is not None
    torch.save(one.learner.optimizer.state_dict(), tmp_path / "numbered" / "optimizer.pt")
    after_one = two_updates(lambda *a, **k: call(one, *a, **k))

    cmd = torchrun() + ["--standalone", "--nproc-per-node", "2", "-m", "mage_learner.worker"]
    env = {"MAGE_DIST_BACKEND": "gloo", "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
    with Client(cmd, env=env, timeout=240) as c:
        c.call("hello", protocol=PROTOCOL_VERSION)
        c.call("load", **load_fields(llama_dir, optimizer=OPT, lora=lora))
        assert c.call("restore", path=str(tmp_path / "one"))[0]["step"] == 1
        resumed = two_updates(c.call)
        c.call("save", path=str(tmp_path / "two"))
        after_two = two_updates(c.call)
        c.call("restore", path=str(tmp_path / "numbered"))
        resumed_numbered = two_updates(c.call)

    back = loaded_worker(llama_dir, optimizer=OPT, lora=lora)
    assert call(back, "restore", path=str(tmp_path / "two"))[0]["step"] == 3
    resumed_back = two_updates(lambda *a, **k: call(back, *a, **k))
    call(back, "restore", path=str(tmp_path / "numbered"))
    numbered_back = two_updates(lambda *a, **k: call(back, *a, **k))
    pairs = ((resumed, after_one), (resumed_back, after_two), (resumed_numbered, after_one), (numbered_back, after_one))
    for got, want in pairs:
        for g, w in zip(got, want):
            assert g["step"] == w["step"]
            assert g["loss"] == pytest.approx(w["loss"], rel=1e-5)
            assert g["gradNorm"] == pytest.approx(w["gradNorm"], rel=1e-5)
    print(f"resume across ranks: {abs(resumed[1]['loss'] - after_one[1]['loss']):.2e}, {abs(resumed_back[1]['loss'] - after_two[1]['loss']):.2e}")
