"""The learner worker: `python -m mage_learner.worker --connect SOCKET_PATH` (or under torchrun,
where rank 0 alone connects and broadcasts each request to the other ranks). Serves requests in
order until `shutdown` or end of stream; every failure becomes an `ok: false` reply (tracebacks go
to stderr, never on the wire)."""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import socket
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from . import PROTOCOL_VERSION, __version__
from .adapters import AdapterCache, adapter_cap, live_adapter, save_adapter, swapped_in
from .decoder import Decoder, unsupported_reason
from .dist import Dist, init_from_env
from .errors import WorkerError, protocol, usage
from .frames import Array, Frame, read_frame, write_frame
from .generate import generate
from .lean import generate_lean
from .learner import Learner, OptimizerSpec, decay_names, make_optimizer
from .model import Loaded, load
from .prefix_cache import PrefixStore
from .render import ChatRenderer, render_request
from .runners import Runner, make_runner
from .sampling import SamplingParams

Reply = tuple[dict[str, Any], dict[str, Array]]


@dataclass
class Worker:
    dist: Dist = field(default_factory=Dist)
    loaded: Loaded | None = None
    learner: Learner | None = None
    renderer: ChatRenderer | None = None
    prefixes: PrefixStore = field(default_factory=lambda: PrefixStore(0))
    runner: Runner | None = None
    adapters: AdapterCache = field(default_factory=lambda: AdapterCache(8))
    stopping: bool = False

    def handle(self, frame: Frame) -> Reply:
        """One request's reply header (with id and ok) and arrays; never raises."""
        req = frame.header
        rid = req.get("id")
        try:
            op = req.get("op")
            fn = getattr(self, f"op_{op}", None) if isinstance(op, str) else None
            if fn is None:
                raise protocol(f"unknown op {op!r} (this worker speaks protocol {PROTOCOL_VERSION})")
            t0 = time.perf_counter()
            try:
                with self._compute(str(op)):
                    header, arrays = fn(req, frame.arrays)
            finally:
                if op in WEIGHT_CHANGING_OPS:  # stored keys and values belong to the old weights
                    self.prefixes.clear()
            return {"id": rid, "ok": True, **header, "handleMs": (time.perf_counter() - t0) * 1000}, arrays
        except WorkerError as e:
            return {"id": rid, "ok": False, "error": e.to_json()}, {}
        except Exception as e:  # noqa: BLE001 - the wire gets the message, stderr the traceback
            traceback.print_exc(file=sys.stderr)
            sys.stderr.flush()
            return {"id": rid, "ok": False, "error": {"kind": "internal", "message": f"{type(e).__name__}: {e}"}}, {}

    def _compute(self, op: str) -> contextlib.AbstractContextManager[Any]:
        """Ops that run the model do so in its precision's context (bfloat16 autocast on a CPU)."""
        if self.loaded is None or op not in COMPUTE_OPS:
            return contextlib.nullcontext()
        return self.loaded.compute()

    def _learner(self) -> Learner:
        if self.learner is None:
            raise protocol("no model loaded: send `load` first")
        return self.learner

    def op_hello(self, req: dict[str, Any], arrays: dict[str, Array]) -> Reply:
        theirs = req.get("protocol")
        if theirs != PROTOCOL_VERSION:
            side = (
                "update the Python worker (python/mage_learner) to the trainer's version"
                if isinstance(theirs, int) and theirs > PROTOCOL_VERSION
                else "update the TypeScript trainer to the worker's version"
            )
            raise protocol(
                f"protocol version mismatch: the trainer speaks {theirs!r}, this worker speaks {PROTOCOL_VERSION}; {side}"
            )
        import peft
        import transformers

        return {
            "protocol": PROTOCOL_VERSION,
            "worker": __version__,
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "peft": peft.__version__,
            "worldSize": self.dist.world,
            "cuda": torch.cuda.is_available(),
        }, {}

    def op_load(self, req: dict[str, Any], arrays: dict[str, Array]) -> Reply:
        cap = adapter_cap(req)
        loaded = load(req)
        spec = OptimizerSpec.from_json(req.get("optimizer"))
        decaying = decay_names(loaded.model)
        model = loaded.model
        if self.dist.active:
            from .fsdp import wrap

            model = wrap(model, loaded.device)
            if loaded.reference is not None:  # full fine-tuning's frozen copy, sharded like the policy
                loaded.reference = wrap(loaded.reference, loaded.device)
        optimizer = make_optimizer(model, spec, decaying)
        self.loaded = loaded
        self.learner = Learner(loaded, model, optimizer, spec, self.dist)
        self.renderer = ChatRenderer(loaded.tokenizer) if getattr(loaded.tokenizer, "chat_template", None) else None
        self.prefixes = PrefixStore(prefix_budget(req, loaded))
        self.runner = lean_runner(req, loaded, self.dist.active)
        self.adapters = AdapterCache(cap)
        params = sum(p.numel() for p in loaded.model.parameters())
        trainable = sum(p.numel() for p in loaded.model.parameters() if p.requires_grad)
        if self.dist.active:  # sharded: count the full tensors
            params, trainable = (int(x) for x in self.dist.sum_floats([float(params), float(trainable)]))
        return {
            "architecture": loaded.architecture,
            "vocabSize": loaded.vocab_size,
            "contextLength": loaded.context_length,
            "parameters": params,
            "trainableParameters": trainable,
            "eosTokenIds": loaded.eos_ids,
            "precision": loaded.precision.note if loaded.precision else "float32",
        }, {}

    def op_render(self, req: dict[str, Any], arrays: dict[str, Array]) -> Reply:
        self._learner()
        if self.renderer is None:
            raise usage("the model's tokenizer has no chat template", "model.torch.path")
        return render_request(self.renderer, req)

    def op_generate(self, req: dict[str, Any], arrays: dict[str, Array]) -> Reply:
        learner = self._learner()
        from .batch import split_sequences

        seqs = split_sequences(arrays, with_mask=False)
        reqs = req.get("requests")
        if not isinstance(reqs, list) or len(reqs) != len(seqs):
            raise protocol(f"generate: {len(seqs)} prompts but `requests` is not a list of {len(seqs)}")
        params = [SamplingParams.from_json(r, f"requests[{i}]") for i, r in enumerate(reqs)]
        assert self.loaded is not None
        t0 = time.perf_counter()
        store = self.prefixes if self.prefixes.budget > 0 else None
        prompts = [s.ids.tolist() for s in seqs]
        with self._sampling_weights(req.get("adapter")):
            if self.runner is not None:
                out = generate_lean(self.runner, self.loaded.tokenizer, self.loaded.eos_ids, prompts, params, store)
            else:
                out = generate(learner.model, self.loaded.tokenizer, self.loaded.device, self.loaded.eos_ids, prompts, params, store)
        if store is None:
            self.prefixes.prefilled_tokens += sum(len(p) for p in prompts)
        tokens = [t for s in out for t in s.tokens]
        return {
            "texts": [s.text for s in out],
            "finish": [s.finish for s in out],
            "decoder": "hf" if self.runner is None else "lean",
            "ms": (time.perf_counter() - t0) * 1000,
            "peakRssBytes": peak_rss_bytes(),
            "prefix": prefix_report(self.prefixes),
            "adapters": self.adapters.report(),
        }, {
            "tokens": np.asarray(tokens, np.int32),
            "token_lengths": np.asarray([len(s.tokens) for s in out], np.int32),
            "logprobs": np.asarray([x for s in out for x in s.logprobs], np.float64),
        }

    def _lora_model(self, what: str) -> tuple[Loaded, torch.nn.Module]:
        learner = self._learner()
        if learner.loaded.lora is None:
            raise usage(f"{what} needs a LoRA model (model.torch.lora); this one is fully fine-tuned", "model.torch.lora")
        if self.dist.active:
            raise usage(f"{what} runs in one process only, not under torchrun", "model.torch.processes")
        return learner.loaded, learner.model

    def _sampling_weights(self, adapter: Any) -> contextlib.AbstractContextManager[Any]:
        """The weights `generate` samples with: the policy's own, or the saved adapter in the
        directory `adapter` swapped in (adapters.py), with prefix-store entries of its own."""
        if adapter is None:
            return contextlib.nullcontext()
        if not isinstance(adapter, str) or not adapter:
            raise protocol(f"generate: adapter must be a directory path or absent, got {adapter!r}")
        loaded, model = self._lora_model("generate with an adapter")
        assert loaded.lora is not None
        live = live_adapter(model)
        weights, evicted = self.adapters.get(adapter, live, loaded.lora)
        for path in evicted:
            self.prefixes.drop_tag(path)
        stack = contextlib.ExitStack()
        stack.enter_context(swapped_in(live, weights))
        stack.enter_context(self.prefixes.tagged(adapter))
        return stack

    def op_save_adapter(self, req: dict[str, Any], arrays: dict[str, Array]) -> Reply:
        path = req.get("path")
        if not isinstance(path, str) or not path:
            raise usage("save_adapter needs a `path`", "path")
        _, model = self._lora_model("save_adapter")
        if self.adapters.forget(path):  # what was read from there is about to be replaced
            self.prefixes.drop_tag(path)
        return save_adapter(model, Path(path)), {}

    def op_logprobs(self, req: dict[str, Any], arrays: dict[str, Array]) -> Reply:
        header, out = self._learner().logprobs(req, arrays)
        return {**header, "peakRssBytes": peak_rss_bytes()}, out

    def op_update(self, req: dict[str, Any], arrays: dict[str, Array]) -> Reply:
        header, out = self._learner().update(req, arrays)
        return {**header, "peakRssBytes": peak_rss_bytes()}, out

    def op_sft(self, req: dict[str, Any], arrays: dict[str, Array]) -> Reply:
        from .sft import sft

        return sft(self._learner(), req, arrays)

    def op_export(self, req: dict[str, Any], arrays: dict[str, Array]) -> Reply:
        from .sft import export

        return export(self._learner(), req), {}

    def op_push_weights(self, req: dict[str, Any], arrays: dict[str, Array]) -> Reply:
        from .push import push_weights

        return push_weights(self._learner(), req), {}

    def op_save(self, req: dict[str, Any], arrays: dict[str, Array]) -> Reply:
        return self._learner().save(req), {}

    def op_restore(self, req: dict[str, Any], arrays: dict[str, Array]) -> Reply:
        reply = self._learner().restore(req)
        if self.runner is not None:
            self.runner.reset()  # captured graphs may hold the replaced tensors' addresses
        return reply, {}

    def op_forget(self, req: dict[str, Any], arrays: dict[str, Array]) -> Reply:
        """Empties generate's prefix store, so what follows does not depend on what came before
        (a resumed run's first rollout must sample as the uninterrupted run's did)."""
        self.prefixes.clear()
        return {}, {}

    def op_shutdown(self, req: dict[str, Any], arrays: dict[str, Array]) -> Reply:
        self.stopping = True
        return {}, {}


WEIGHT_CHANGING_OPS = frozenset({"load", "update", "sft", "restore"})
COMPUTE_OPS = frozenset({"generate", "logprobs", "update", "sft"})


DECODERS = ("hf", "lean", "auto")


def lean_runner(req: dict[str, Any], loaded: Loaded, sharded: bool) -> Runner | None:
    """The lean decoder's runner when `decoder` asks for it (lean: always, failing if the model
    cannot; auto: on CUDA when the model allows, since on a CPU the lean step is no faster), else
    None (the Hugging Face sampler). CUDA graphs unless `cudaGraphs: false`."""
    choice = req.get("decoder", "hf")
    if choice not in DECODERS:
        raise usage(f"decoder must be one of {', '.join(DECODERS)}, got {choice!r}", "model.torch.decoder")
    if choice == "hf" or (choice == "auto" and loaded.device.type != "cuda"):
        return None
    reason = "FSDP shards the weights the lean step reads" if sharded else unsupported_reason(loaded.model)
    if reason is not None:
        if choice == "lean":
            raise usage(f"decoder lean: {reason}; use decoder: hf or auto", "model.torch.decoder")
        return None
    return make_runner(Decoder(loaded.model), bool(req.get("cudaGraphs", True)))


def prefix_report(store: PrefixStore) -> dict[str, int]:
    """Prompt tokens taken from stored keys and values vs prefilled, since the model was loaded
    (counts, so a caller can tell its own share by difference), and what the store holds now."""
    return {
        "reusedTokens": store.reused_tokens,
        "prefilledTokens": store.prefilled_tokens,
        "entries": len(store.entries),
        "bytes": store.bytes,
        "budgetBytes": store.budget,
    }


def prefix_budget(req: dict[str, Any], loaded: Loaded) -> int:
    """Bytes of stored keys and values `generate` may keep (`prefixCacheMB`, default 1024); 0 for
    models with sliding-window layers, whose caches are not plain per-token tensors."""
    mb = req.get("prefixCacheMB", 1024)
    if not isinstance(mb, (int, float)) or isinstance(mb, bool) or mb < 0:
        raise usage(f"prefixCacheMB must be a number ≥ 0, got {mb!r}", "model.torch.prefixCacheMB")
    types = getattr(loaded.model.config, "layer_types", None) or []
    if any(t != "full_attention" for t in types) or getattr(loaded.model.config, "use_sliding_window", False):
        return 0
    return int(mb * 2**20)


MMAP_THRESHOLD_BYTES = 1 << 20
M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number (malloc.h)


def release_freed_tensors_promptly() -> None:
    """Has glibc serve every allocation of MMAP_THRESHOLD_BYTES or more with its own mapping, so
    that freeing a tensor returns its memory to the system. By default glibc raises that threshold
    (up to 32 MiB) as large blocks are freed, and the activations a backward pass frees then stay
    resident in a fragmented heap: one 3,750-token micro-batch of a LoRA update of SmolLM2-135M
    (gradient checkpointing on) grew the resident memory by 4.3 GB instead of 0.55 GB, at the
    price of page faults on fresh mappings (that micro-batch took about 1.5× as long). An explicit
    MALLOC_MMAP_THRESHOLD_ in the environment wins."""
    if not sys.platform.startswith("linux") or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return
    import ctypes

    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is not None:  # absent or a no-op outside glibc (musl)
        mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)


def peak_rss_bytes() -> int:
    """The most resident memory this process has held since it started."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # Linux counts kilobytes, macOS bytes


def serve(worker: Worker, rfile: Any, wfile: Any) -> None:
    """Rank 0's loop: read, broadcast, handle, reply; until shutdown or end of stream."""
    while not worker.stopping:
        try:
            frame = read_frame(rfile)
        except WorkerError as e:
            write_frame(wfile, {"id": None, "ok": False, "error": e.to_json()})
            if "stream ended" in e.message:
                frame = None
            else:
                continue
        worker.dist.broadcast_object(frame)
        if frame is None:
            break
        header, arrays = worker.handle(frame)
        write_frame(wfile, header, arrays)


def follow(worker: Worker) -> None:
    """Ranks > 0: run every request rank 0 broadcasts, drop the replies."""
    while not worker.stopping:
        frame = worker.dist.broadcast_object(None)
        if frame is None:
            break
        worker.handle(frame)


def exit_with_launcher() -> None:
    """Ends this process when its parent goes away. torchrun starts each rank in a session of its
    own, so a launcher killed with SIGKILL would otherwise leave ranks > 0 waiting on a broadcast
    until gloo's 30-minute timeout."""
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="launcher-watch", daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mage_learner.worker", description=__doc__)
    ap.add_argument("--connect", required=True, help="the trainer's Unix socket path")
    args = ap.parse_args(argv)
    exit_with_launcher()
    release_freed_tensors_promptly()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # local directories only, never the network
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    dist = init_from_env()
    worker = Worker(dist)
    try:
        if dist.rank == 0:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(args.connect)
            except OSError as e:
                print(f"mage_learner.worker: cannot connect to {args.connect}: {e}", file=sys.stderr)
                worker.dist.broadcast_object(None)
                return 1
            with sock, sock.makefile("rb") as rfile, sock.makefile("wb") as wfile:
                serve(worker, rfile, wfile)
        else:
            follow(worker)
    finally:
        if dist.active:
            import torch.distributed as tdist

            tdist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
