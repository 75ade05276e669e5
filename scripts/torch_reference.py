#!/usr/bin/python3
"""PyTorch reference for mage's embedded learner (local measurement only; CI never runs it).

    /usr/bin/python3 scripts/torch_reference.py IN.safetensors OUT.safetensors [--steps N] [--warmup W]

IN (written by src/bench/torch-compare.ts) holds the model weights under their llama.cpp names,
the batch (`batch.tokens` I32 [B, L], `batch.mask` U8 [B, L], `batch.adv` F32 [B, L]) and, in
`__metadata__`, the model config, the AdamW settings, the clip norm and the entropy coefficient.

The architecture is mage's (src/model/transformer.ts), written again here with torch ops:
RMSNorm, RoPE on ADJACENT pairs (2i, 2i+1) with theta = pos * base^(-2i/headDim), causal softmax
attention with scale 1/sqrt(headDim), SwiGLU MLP, no biases, output head tied to token_embd.
The loss is mage's policy-gradient bench loss over the scored tokens (mask[b, t] = 1 scores
token t, predicted from position t - 1):

    loss = -(1/N) * sum(adv * log p(target) + entropyCoef * entropy)

Writes to OUT the loss and the gradient of every weight, in float32 (`grad32.<name>`) and in
float64 (`grad64.<name>`, the rounding-free reference), and prints one JSON line with the losses
and the time per training step (forward + backward + grad-norm clip + AdamW) in float32 with
torch.set_num_threads(1): median wall and process-CPU milliseconds over --steps steps after
--warmup steps.
"""

import json
import math
import os
import statistics
import struct
import sys
import time

import torch

DTYPES = {"F32": torch.float32, "I32": torch.int32, "U8": torch.uint8, "F64": torch.float64}
NAMES = {v: k for k, v in DTYPES.items()}


def read_safetensors(path):
    with open(path, "rb") as f:
        buf = f.read()
    (n,) = struct.unpack("<Q", buf[:8])
    header = json.loads(buf[8 : 8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {}) or {}
    data = bytearray(buf[8 + n :])
    out = {}
    for name, info in header.items():
        a, b = info["data_offsets"]
        t = torch.frombuffer(data[a:b], dtype=DTYPES[info["dtype"]]) if b > a else torch.empty(0)
        out[name] = t.reshape(info["shape"]).clone()
    return out, meta


def write_safetensors(path, tensors, meta):
    header = {"__metadata__": {k: str(v) for k, v in meta.items()}}
    blobs = []
    off = 0
    for name, t in tensors.items():
        raw = t.detach().contiguous().cpu().numpy().tobytes()
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode("utf-8")
    h += b" " * ((8 - len(h) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for raw in blobs:
            f.write(raw)
    os.replace(tmp, path)


class Model:
    """The weights as leaf tensors plus mage's forward pass and loss."""

    def __init__(self, cfg, weights, dtype):
        self.cfg = cfg
        self.names = list(weights.keys())
        self.p = {k: v.to(dtype).clone().requires_grad_(True) for k, v in weights.items()}
        d, H = cfg["dModel"], cfg["nHeads"]
        hd = d // H
        self.H, self.hd = H, hd
        L = cfg["contextLength"]
        i = torch.arange(hd // 2, dtype=torch.float64)
        freq = cfg["ropeBase"] ** (-2.0 * i / hd)
        ang = torch.arange(L, dtype=torch.float64)[:, None] * freq[None, :]
        # mage stores the cos/sin tables in float32.
        self.cos = torch.cos(ang).to(torch.float32).to(dtype)
        self.sin = torch.sin(ang).to(torch.float32).to(dtype)

    def rmsnorm(self, x, g):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.cfg["normEps"]) * g

    def rope(self, x):
        # x [B, L, H, hd]; rotate the adjacent pairs (2i, 2i+1).
        B, L, H, hd = x.shape
        xp = x.reshape(B, L, H, hd // 2, 2)
        a, b = xp[..., 0], xp[..., 1]
        c = self.cos[:L, None, :]
        s = self.sin[:L, None, :]
        return torch.stack((a * c - b * s, a * s + b * c), dim=-1).reshape(B, L, H, hd)

    def loss(self, tokens, mask, adv, entropy_coef):
        cfg, p = self.cfg, self.p
        B, L = tokens.shape
        H, hd = self.H, self.hd
        E = p["token_embd.weight"]
        x = E[tokens.long()]
        causal = torch.ones(L, L, dtype=torch.bool).triu(1)
        scale = 1.0 / math.sqrt(hd)
        for layer in range(cfg["nLayers"]):
            w = lambda n: p[f"blk.{layer}.{n}.weight"]  # noqa: E731
            n1 = self.rmsnorm(x, w("attn_norm"))
            q = self.rope((n1 @ w("attn_q").t()).view(B, L, H, hd)).transpose(1, 2)
            k = self.rope((n1 @ w("attn_k").t()).view(B, L, H, hd)).transpose(1, 2)
            v = (n1 @ w("attn_v").t()).view(B, L, H, hd).transpose(1, 2)
            s = (q @ k.transpose(-1, -2)) * scale
            s = s.masked_fill(causal, float("-inf"))
            att = torch.softmax(s, dim=-1) @ v
            x = x + att.transpose(1, 2).reshape(B, L, H * hd) @ w("attn_output").t()
            n2 = self.rmsnorm(x, w("ffn_norm"))
            hidden = torch.nn.functional.silu(n2 @ w("ffn_gate").t()) * (n2 @ w("ffn_up").t())
            x = x + hidden @ w("ffn_down").t()
        h = self.rmsnorm(x, p["output_norm.weight"])
        # Only positions that predict a scored token go through the head.
        m = mask[:, 1:].bool()
        hs = h[:, :-1][m]
        logits = hs @ E.t()
        logp_all = torch.log_softmax(logits, dim=-1)
        logp = logp_all.gather(1, tokens[:, 1:][m].long()[:, None])[:, 0]
        entropy = -(logp_all.exp() * logp_all).sum(-1)
        a = adv[:, 1:][m].to(logp.dtype)
        n = logp.shape[0]
        return -(a * logp + entropy_coef * entropy).sum() / n

    def params(self):
        return [self.p[n] for n in self.names]


def main():
    args = sys.argv[1:]
    if len(args) < 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    src, dst = args[0], args[1]
    steps = int(args[args.index("--steps") + 1]) if "--steps" in args else 3
    warmup = int(args[args.index("--warmup") + 1]) if "--warmup" in args else 1
    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass

    tensors, meta = read_safetensors(src)
    cfg = json.loads(meta["config"])
    opt = json.loads(meta["adamw"])
    max_norm = float(meta["maxGradNorm"])
    coef = float(meta["entropyCoef"])
    tokens = tensors.pop("batch.tokens")
    mask = tensors.pop("batch.mask")
    adv = tensors.pop("batch.adv")
    weights = tensors

    out = {}
    losses = {}
    for tag, dtype in (("32", torch.float32), ("64", torch.float64)):
        model = Model(cfg, weights, dtype)
        loss = model.loss(tokens, mask, adv, coef)
        loss.backward()
        losses[tag] = loss.item()
        for name in model.names:
            out[f"grad{tag}.{name}"] = model.p[name].grad.to(torch.float32)

    # Timed training steps (float32): forward, backward, clip, AdamW.
    model = Model(cfg, weights, torch.float32)
    decay = [model.p[n] for n in model.names if model.p[n].dim() == 2 and n != "token_embd.weight"]
    keep = [model.p[n] for n in model.names if not (model.p[n].dim() == 2 and n != "token_embd.weight")]
    optim = torch.optim.AdamW(
        [{"params": decay, "weight_decay": opt["weightDecay"]}, {"params": keep, "weight_decay": 0.0}],
        lr=opt["lr"],
        betas=(opt["beta1"], opt["beta2"]),
        eps=opt["eps"],
    )
    wall, cpu = [], []
    for i in range(warmup + steps):
        w0, c0 = time.perf_counter(), time.process_time()
        optim.zero_grad(set_to_none=True)
        loss = model.loss(tokens, mask, adv, coef)
        loss.backward()
        if max_norm > 0:
            torch.nn.utils.clip_grad_norm_(model.params(), max_norm)
        optim.step()
        w1, c1 = time.perf_counter(), time.process_time()
        if i >= warmup:
            wall.append((w1 - w0) * 1000)
            cpu.append((c1 - c0) * 1000)

    write_safetensors(dst, out, {"loss32": repr(losses["32"]), "loss64": repr(losses["64"])})
    print(
        json.dumps(
            {
                "torch": torch.__version__,
                "threads": torch.get_num_threads(),
                "loss32": losses["32"],
                "loss64": losses["64"],
                "stepMs": statistics.median(wall),
                "stepCpuMs": statistics.median(cpu),
                "steps": steps,
            }
        )
    )


if __name__ == "__main__":
    main()
