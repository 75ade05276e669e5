"""The prepared GPU check (scripts/gpu-check.sh): on a machine with one NVIDIA GPU, in under 8
minutes, it checks the lean decoder's CUDA graphs against eager steps and times them beside the
Hugging Face sampler (gpu_decoder.py), runs the worker's pytest suite on CUDA, compares SmolLM2's
float32 log-probs on CUDA and CPU, measures bf16 LoRA generate and update throughput, and trains 5
MAGE iterations on Kuhn (16 compact trials each, lean decoder) through the TypeScript trainer;
then prints one summary and writes it as JSON.

    scripts/gpu-check.sh [--model DIR] [--out FILE] [--budget S]
    scripts/gpu-check.sh --device cpu --quick      # a dry run on CPU with tiny sizes

Every step runs in its own process with a time limit (a crash, an out-of-memory kill or a hang
is recorded and the next step runs); a step is skipped with a reason when what it needs is
absent (the model directory, node, dist/). The exit status is 0 when no step failed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .gpu_common import (
    KUHN_HANDS,
    free_memory,
    kuhn_prompts,
    kuhn_sequences,
    linear_module_names,
    peak_gib,
    reset_peak,
    timed,
)
from .gpu_decoder import step_decoder

DEFAULT_MODEL = "models/smollm2-135m-instruct"
TINY = "tiny"  # --model tiny: a random 2-layer Llama from mage_learner.tiny (plumbing only)
LOGP_BOUND = 1e-3  # float32 with TF32 off: CUDA and CPU kernels differ only in summation order
LORA_RANK = 16
TRAIN_CONFIG = "configs/kuhn-mage.yaml"
# Test modules that need a package a GPU machine's own Python may lack (the adapters, the W&B sidecar).
OPTIONAL_PACKAGES = {"test_openspiel_server.py": "pyspiel", "test_textarena_server.py": "textarena", "test_wandb_sidecar.py": "wandb"}
PIN_MODULE = "test_environment.py"  # the pin check: it imports every pinned package, wandb too

@dataclass(frozen=True)
class Sizes:
    """Workload sizes: the real ones on the GPU, tiny ones for a quick dry run."""

    generate_batches: tuple[int, ...]
    new_tokens: int
    update_rows: int
    update_len: int
    update_repeats: int
    train_iterations: int
    train_sets: tuple[str, ...]


# On an H200 the Hugging Face sampler is launch-bound (50-75 ms a decode step at any batch up to
# 64; kuhn-mage's 128 trials took 151 s an iteration); the decoder step times it beside the lean
# decoder at 1 / 16 / 64 sequences, so the lora step times generate at 16 only. Training samples
# with the lean decoder (decoder: auto): 5 iterations of 16 compact trials.
FULL = Sizes(
    (16,),
    64,
    16,
    512,
    3,
    5,
    ("rollout.tasksPerIteration=4", "rollout.groupSize=4", "task.promptStyle=compact", "model.torch.decoder=auto"),
)
QUICK = Sizes(
    (1, 4),
    8,
    4,
    64,
    1,
    1,
    ("rollout.tasksPerIteration=2", "rollout.groupSize=2", "rollout.maxResponseTokens=8"),
)


@dataclass
class StepResult:
    name: str
    status: str  # ok | failed | skipped
    seconds: float = 0.0
    headline: str = ""
    reason: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    log: str | None = None
    tail: list[str] | None = None


@dataclass
class Context:
    root: Path
    python: str
    device: str
    quick: bool
    sizes: Sizes
    logs: Path
    work: Path
    deadline: float
    model: Path | None = None
    model_note: str = ""
    skip: frozenset[str] = frozenset()

    def remaining(self) -> float:
        return self.deadline - time.perf_counter()


def make_learner(loaded: Any) -> Any:
    from .learner import Learner, OptimizerSpec, decay_names, make_optimizer

    spec = OptimizerSpec(lr=1e-5)
    return Learner(loaded, loaded.model, make_optimizer(loaded.model, spec, decay_names(loaded.model)), spec)


# ----- in-process steps (run in a child process) -------------------------------------------------


def step_env(args: argparse.Namespace) -> dict[str, Any]:
    """Versions, the GPU, and the installed versions that differ from python/requirements.txt."""
    import peft
    import torch
    import transformers

    cuda = torch.cuda.is_available()
    d: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if cuda else None,  # type: ignore[no-untyped-call]
        "transformers": transformers.__version__,
        "peft": peft.__version__,
        "cuda_available": cuda,
        "gpu": None,
    }
    if cuda:
        p = torch.cuda.get_device_properties(0)
        d["gpu"] = p.name
        d["gpu_memory_gib"] = round(p.total_memory / 2**30, 1)
        d["capability"] = f"{p.major}.{p.minor}"
        d["gpu_count"] = torch.cuda.device_count()
        d["driver"] = nvidia_driver()
    installed = {"torch": torch.__version__.split("+")[0], "transformers": transformers.__version__, "peft": peft.__version__}
    d["pin_mismatches"] = pin_mismatches(Path(args.root) / "python" / "requirements.txt", installed)
    d["optional_packages"] = {pkg: has_module(pkg) for pkg in OPTIONAL_PACKAGES.values()}
    status, reason = "ok", None
    if args.device.startswith("cuda") and not cuda:
        status, reason = "failed", f"--device {args.device}, but this torch ({torch.__version__}) sees no CUDA device"
    gpu = f"{d['gpu']} ({d.get('gpu_memory_gib')} GiB)" if cuda else "no CUDA device"
    headline = f"{gpu}; torch {d['torch']} (CUDA {d['cuda']}), transformers {d['transformers']}, peft {d['peft']}"
    return {"status": status, "reason": reason, "headline": headline, "details": d}


def nvidia_driver() -> str | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


def pin_mismatches(requirements: Path, installed: dict[str, str]) -> list[str]:
    pins: dict[str, str] = {}
    if requirements.is_file():
        for line in requirements.read_text().splitlines():
            line = line.split("#")[0].strip()
            if "==" in line:
                name, version = line.split("==")
                pins[name.strip().lower()] = version.strip()
    return [f"{n} {v} installed, {pins[n]} pinned" for n, v in installed.items() if n in pins and pins[n] != v]


def has_module(name: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def step_logprobs(args: argparse.Namespace) -> dict[str, Any]:
    """float32 log-probs of chat-rendered Kuhn answers on the device and on the CPU."""
    import torch

    from .learner import score
    from .model import load

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    per_device: dict[str, Any] = {}
    seconds: dict[str, float] = {}
    seqs: list[Any] = []
    for dev in (args.device, "cpu"):
        loaded = load({"model": args.model, "dtype": "float32", "device": dev})
        seqs = seqs or kuhn_sequences(loaded.tokenizer)
        with torch.no_grad():
            (lp, _), seconds[dev] = timed(dev, lambda: score(loaded.model, seqs, loaded.device))
        per_device[dev] = lp.double().cpu()
        del loaded
        free_memory(dev)
    delta = (per_device[args.device] - per_device["cpu"]).abs()
    worst = float(delta.max())
    d = {
        "tokens": int(delta.numel()),
        "sequences": len(seqs),
        "max_abs_delta": worst,
        "mean_abs_delta": float(delta.mean()),
        "bound": LOGP_BOUND,
        "tf32": False,
        "score_seconds": {k: round(v, 3) for k, v in seconds.items()},
        "mean_logp": float(per_device["cpu"].mean()),
    }
    ok = worst <= LOGP_BOUND
    headline = f"max |Δ logp| {args.device} vs cpu = {worst:.2e} (bound {LOGP_BOUND:.0e}, float32, TF32 off) over {d['tokens']} tokens"
    return {"status": "ok" if ok else "failed", "reason": None if ok else f"max |Δ logp| {worst:.3e} > {LOGP_BOUND:.0e}", "headline": headline, "details": d}


def train_dtype(device: str) -> str:
    """bfloat16 on CUDA; float32 on the CPU, where bf16 matmuls are far slower (a dry run)."""
    return "bfloat16" if device.startswith("cuda") else "float32"


def step_lora(args: argparse.Namespace) -> dict[str, Any]:
    """LoRA (rank 16, every linear layer), bf16 on CUDA: generate tokens/s per batch size, update tokens/s."""
    from .model import load

    sizes = QUICK if args.quick else FULL
    targets = linear_module_names(Path(args.model))
    lora = {"rank": LORA_RANK, "alpha": 2 * LORA_RANK, "dropout": 0.0, "targetModules": targets}
    dtype = train_dtype(args.device)
    (loaded, load_s) = timed(args.device, lambda: load({"model": args.model, "dtype": dtype, "device": args.device, "lora": lora, "seed": 0}))
    learner = make_learner(loaded)
    gen = measure_generate(loaded, args.device, sizes)
    upd = measure_update(learner, args.device, sizes)
    d = {
        "lora": lora,
        "dtype": dtype,
        "trainable_parameters": sum(p.numel() for p in loaded.model.parameters() if p.requires_grad),
        "parameters": sum(p.numel() for p in loaded.model.parameters()),
        "load_s": round(load_s, 2),
        "generate": gen,
        "update": upd,
    }
    peaks = [x["peak_gib"] for x in [*gen, upd] if x["peak_gib"] is not None]
    d["max_memory_allocated_gib"] = max(peaks) if peaks else None
    rates = ", ".join(f"{g['sequences']}→{g['tokens_per_s']:.0f}" for g in gen)
    mem = "" if d["max_memory_allocated_gib"] is None else f"; max_memory_allocated {d['max_memory_allocated_gib']:.2f} GiB"
    headline = (
        f"{dtype} LoRA r{LORA_RANK}, generate tok/s (seqs→tok/s, {sizes.new_tokens} new): {rates}; "
        f"update {upd['rows']}×{upd['length']}: {upd['tokens_per_s']:.0f} tok/s{mem}"
    )
    return {"status": "ok", "reason": None, "headline": headline, "details": d}


def measure_generate(loaded: Any, device: str, sizes: Sizes) -> list[dict[str, Any]]:
    from .generate import generate
    from .sampling import SamplingParams

    prompts = kuhn_prompts(loaded.tokenizer)

    def run(n: int, new: int) -> float:
        batch = [prompts[i % len(prompts)] for i in range(n)]
        params = [SamplingParams(max_new_tokens=new, temperature=1.0, seed=i) for i in range(n)]
        # No stop ids: every row samples exactly `new` tokens, so tokens/s counts a fixed amount.
        _, s = timed(device, lambda: generate(loaded.model, loaded.tokenizer, loaded.device, [], batch, params))
        return s

    run(2, 4)  # warm-up: kernels, allocator
    out: list[dict[str, Any]] = []
    for n in sizes.generate_batches:
        reset_peak(device)
        s = run(n, sizes.new_tokens)
        toks = n * sizes.new_tokens
        out.append({"sequences": n, "new_tokens": sizes.new_tokens, "seconds": round(s, 3), "tokens_per_s": round(toks / s, 1), "peak_gib": peak_gib(device)})
    return out


def update_arrays(vocab: int, rows: int, length: int, seed: int = 0) -> dict[str, Any]:
    """Random token rows; the first eighth of each row is the unscored prompt."""
    import numpy as np

    rng = np.random.default_rng(seed)
    ids = rng.integers(3, vocab, size=(rows, length)).astype(np.int32)
    mask = np.zeros((rows, length), np.uint8)
    mask[:, max(1, length // 8) :] = 1
    return {"ids": ids.reshape(-1), "lengths": np.full(rows, length, np.int32), "loss_mask": mask.reshape(-1)}


def measure_update(learner: Any, device: str, sizes: Sizes) -> dict[str, Any]:
    import numpy as np

    arrays = update_arrays(learner.loaded.vocab_size, sizes.update_rows, sizes.update_len)
    _, lp = learner.logprobs({}, arrays)
    scored = int(arrays["loss_mask"].sum())
    batch = {**arrays, "old_logp": lp["logp"], "advantages": np.random.default_rng(1).normal(0, 1, scored)}
    times: list[float] = []
    reply: dict[str, Any] = {}
    reset_peak(device)
    for _ in range(sizes.update_repeats + 1):  # the first is a warm-up
        (reply, _), s = timed(device, lambda: learner.update({"loss": {}, "lr": 1e-5}, batch))
        times.append(s)
    med = statistics.median(times[1:])
    tokens = sizes.update_rows * sizes.update_len
    return {
        "rows": sizes.update_rows,
        "length": sizes.update_len,
        "tokens": tokens,
        "scored": scored,
        "first_s": round(times[0], 3),
        "median_s": round(med, 3),
        "tokens_per_s": round(tokens / med, 1),
        "loss_finite": bool(np.isfinite(reply.get("loss", float("nan")))),
        "skipped": reply.get("skipped"),
        "peak_gib": peak_gib(device),
    }


CHILD_STEPS: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {
    "env": step_env,
    "decoder": step_decoder,
    "logprobs": step_logprobs,
    "lora": step_lora,
}


def run_child(args: argparse.Namespace) -> int:
    result = CHILD_STEPS[args.step](args)
    Path(args.result).write_text(json.dumps(result, default=str))
    return 0


# ----- the orchestrator --------------------------------------------------------------------------


@dataclass
class Proc:
    returncode: int | None  # None: killed at the time limit
    seconds: float


def run_logged(cmd: list[str], log: Path, timeout: float, cwd: Path, env: dict[str, str] | None = None) -> Proc:
    """Runs `cmd` (in its own process group, killed whole at the time limit), output to `log`."""
    t0 = time.perf_counter()
    with log.open("w") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        p = subprocess.Popen(cmd, cwd=cwd, stdout=f, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}, start_new_session=True)
        try:
            code: int | None = p.wait(timeout=max(timeout, 1.0))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            code = None
    return Proc(code, time.perf_counter() - t0)


def tail(log: Path, n: int = 20) -> list[str]:
    try:
        return log.read_text(errors="replace").splitlines()[-n:]
    except OSError:
        return []


def step_budget(ctx: Context, cap: float) -> float:
    return min(cap, ctx.remaining())


def no_time(name: str) -> StepResult:
    return StepResult(name, "failed", reason="the time budget was spent before this step could start (raise --budget)")


def finish(name: str, proc: Proc, log: Path, ctx: Context, limit: float) -> StepResult:
    """A StepResult for a subprocess that did not write a result of its own."""
    r = StepResult(name, "ok", round(proc.seconds, 1), log=str(log.relative_to(ctx.logs.parent)))
    if proc.returncode is None:
        r.status, r.reason = "failed", f"killed at its time limit ({limit:.0f} s)"
    elif proc.returncode != 0:
        r.status, r.reason = "failed", f"exit status {proc.returncode}"
    if r.status == "failed":
        r.tail = tail(log)
    return r


def run_child_step(ctx: Context, name: str, cap: float) -> StepResult:
    limit = step_budget(ctx, cap)
    if limit < 5:
        return no_time(name)
    result = ctx.work / f"{name}.json"
    cmd = [ctx.python, "-m", "mage_learner.gpu_check", "--step", name, "--device", ctx.device, "--result", str(result), "--root", str(ctx.root)]
    if ctx.model is not None:
        cmd += ["--model", str(ctx.model)]
    if ctx.quick:
        cmd.append("--quick")
    log = ctx.logs / f"{name}.log"
    proc = run_logged(cmd, log, limit, ctx.root, {"PYTHONPATH": python_path(ctx.root)})
    r = finish(name, proc, log, ctx, limit)
    if r.status == "ok" and result.is_file():
        out = json.loads(result.read_text())
        r.status, r.reason, r.headline, r.details = out["status"], out.get("reason"), out.get("headline", ""), out.get("details", {})
        if r.status == "failed":
            r.tail = tail(log)
    elif r.status == "ok":
        r.status, r.reason, r.tail = "failed", "the step wrote no result", tail(log)
    return r


def python_path(root: Path) -> str:
    prev = os.environ.get("PYTHONPATH")
    return str(root / "python") + (os.pathsep + prev if prev else "")


def pytest_command(ctx: Context, env_info: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The pytest command line and the notes on what it leaves out."""
    tests = ctx.root / "python" / "tests"
    target = str(tests / "test_device.py") if ctx.quick else str(tests)
    cmd = [ctx.python, "-m", "pytest", "-q", "-p", "no:cacheprovider", target, "-k", "not openspiel and not textarena"]
    notes: list[str] = []
    if env_info.get("pin_mismatches"):  # a system-wide torch is not the pinned one: not a GPU failure
        cmd += ["--ignore", str(tests / PIN_MODULE)]
        notes.append(f"{PIN_MODULE} ignored: " + "; ".join(env_info["pin_mismatches"]))
    if ctx.quick:
        notes.append("quick: test_device.py only")
    packages = env_info.get("optional_packages", {})
    for file, pkg in OPTIONAL_PACKAGES.items():
        if not packages.get(pkg, False):
            cmd += ["--ignore", str(tests / file)]
            notes.append(f"{file} ignored ({pkg} not installed)")
    return cmd, notes


def junit_counts(xml: Path) -> dict[str, int] | None:
    """passed / failed / errors / skipped from pytest's JUnit XML, or None when it wrote none."""
    import xml.etree.ElementTree as ET

    try:
        root = ET.parse(xml).getroot()
    except (OSError, ET.ParseError):
        return None
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    total = {k: sum(int(s.get(k, "0")) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    return {
        "passed": total["tests"] - total["failures"] - total["errors"] - total["skipped"],
        "failed": total["failures"],
        "errors": total["errors"],
        "skipped": total["skipped"],
    }


def run_pytest(ctx: Context, env_info: dict[str, Any], cap: float) -> StepResult:
    limit = step_budget(ctx, cap)
    if limit < 5:
        return no_time("pytest")
    cmd, notes = pytest_command(ctx, env_info)
    xml = ctx.work / "pytest.xml"
    log = ctx.logs / "pytest.log"
    proc = run_logged([*cmd, f"--junit-xml={xml}"], log, limit, ctx.root, {"MAGE_TEST_DEVICE": ctx.device, "PYTHONPATH": python_path(ctx.root)})
    r = finish("pytest", proc, log, ctx, limit)
    counts = junit_counts(xml)
    outcome = ", ".join(f"{v} {k}" for k, v in counts.items() if v) if counts else "no JUnit report"
    r.headline = f"{outcome} (MAGE_TEST_DEVICE={ctx.device}{'; ' + '; '.join(notes) if notes else ''})"
    r.details = {"command": cmd, "notes": notes, "counts": counts}
    if proc.returncode == 5:  # pytest: no tests collected
        r.status, r.reason = "failed", "pytest collected no tests"
    return r


def train_command(ctx: Context, run_dir: Path) -> list[str]:
    sets = [
        "model.backend=torch",
        f"model.torch.path={ctx.model}",
        f"model.torch.device={ctx.device}",
        f"model.torch.dtype={train_dtype(ctx.device)}",
        f"model.torch.lora={{rank: {LORA_RANK}, alpha: {2 * LORA_RANK}}}",
        f"train.iterations={ctx.sizes.train_iterations}",
        "eval.every=0",  # no periodic evaluation; the final one is cut to 1 trial of 1 cell
        "eval.finalTrials=1",
        "eval.cells=[{opponent: intermediate, seat: first}]",
        *ctx.sizes.train_sets,
    ]
    cmd = ["node", str(ctx.root / "dist" / "cli" / "main.js"), "train", "--config", str(ctx.root / TRAIN_CONFIG), "--out", str(run_dir), "--no-progress"]
    for s in sets:
        cmd += ["--set", s]
    return cmd


def iteration_seconds(metrics: list[dict[str, Any]]) -> list[float]:
    """Seconds of each iteration from the cumulative `wall_s` of metrics.jsonl."""
    walls = [float(m["wall_s"]) for m in metrics if "wall_s" in m]
    return [round(b - a, 2) for a, b in zip([0.0, *walls], walls, strict=False)]


def mean_of(metrics: list[dict[str, Any]], key: str) -> float | None:
    values = [float(m[key]) for m in metrics if m.get(key) is not None]
    return round(statistics.fmean(values), 1) if values else None


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def train_skip_reason(ctx: Context) -> str | None:
    if ctx.model is None:
        return ctx.model_note
    if shutil.which("node") is None:
        return "node is not on PATH: the TypeScript trainer cannot run here"
    if not (ctx.root / "dist" / "cli" / "main.js").is_file():
        return "dist/cli/main.js is missing: build with npm run build"
    return None


def run_train(ctx: Context, cap: float) -> StepResult:
    skip = train_skip_reason(ctx)
    if skip is not None:
        return StepResult("train", "skipped", reason=skip)
    limit = step_budget(ctx, cap)
    if limit < 5:
        return no_time("train")
    run_dir = ctx.work / "kuhn-run"
    cmd = train_command(ctx, run_dir)
    log = ctx.logs / "train.log"
    proc = run_logged(cmd, log, limit, ctx.root, {"MAGE_PYTHON": ctx.python})
    r = finish("train", proc, log, ctx, limit)
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    per_it = iteration_seconds(metrics)
    r.details = {
        "command": cmd,
        "iterations": len(metrics),
        "seconds_per_iteration": per_it,
        "mean_seconds_per_iteration": round(statistics.fmean(per_it), 2) if per_it else None,
        "mean_rollout_ms": mean_of(metrics, "rollout_ms"),
        "mean_update_ms": mean_of(metrics, "update_ms"),
        "command_seconds": round(proc.seconds, 1),
    }
    if r.status == "ok" and len(metrics) < ctx.sizes.train_iterations:
        r.status, r.reason, r.tail = "failed", f"metrics.jsonl has {len(metrics)} of {ctx.sizes.train_iterations} iterations", tail(log)
    its = ", ".join(f"{s:.1f}" for s in per_it)
    r.headline = f"{len(metrics)} MAGE iteration(s) on Kuhn, s/iteration: {its or '-'} (whole command {proc.seconds:.0f} s)"
    return r


def resolve_model(ctx: Context, requested: str) -> None:
    """Sets ctx.model: the model directory, or for a quick run without it a tiny random Llama."""
    if requested == TINY:
        ctx.model, ctx.model_note = tiny_model(ctx), "tiny: a random 2-layer Llama (mage_learner.tiny)"
        return
    p = Path(requested).resolve()  # relative to the working directory, else to the project
    if not p.exists() and not Path(requested).is_absolute():
        p = ctx.root / requested
    if (p / "config.json").is_file():
        ctx.model, ctx.model_note = p, str(p)
        return
    if ctx.quick:
        ctx.model, ctx.model_note = tiny_model(ctx), f"{requested} absent: a random 2-layer Llama (mage_learner.tiny)"
        return
    ctx.model, ctx.model_note = None, f"model directory {p} is absent (pass --model DIR): SmolLM2 steps skipped"


def tiny_model(ctx: Context) -> Path:
    from transformers.utils import logging as hf_logging

    from .tiny import build_model

    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # keep the terminal for the summary
    return build_model(ctx.work / "tiny-llama", "llama")


def model_step(ctx: Context, name: str, cap: float) -> StepResult:
    if ctx.model is None:
        return StepResult(name, "skipped", reason=ctx.model_note)
    return run_child_step(ctx, name, cap)


# Caps in seconds per step at full size; all of them also stop at the run's overall deadline.
CAPS = {"env": 60.0, "pytest": 150.0, "decoder": 120.0, "logprobs": 60.0, "lora": 90.0, "train": 300.0}


def run_steps(ctx: Context, requested_model: str) -> list[StepResult]:
    steps: list[StepResult] = []

    def timed_step(name: str, fn: Callable[[], StepResult]) -> StepResult:
        t0 = time.perf_counter()
        r = StepResult(name, "skipped", reason="--skip") if name in ctx.skip else fn()
        r.seconds = round(time.perf_counter() - t0, 1)
        steps.append(r)
        print(f"gpu-check: {r.name}: {r.status} ({r.seconds} s)", file=sys.stderr, flush=True)
        return r

    env = timed_step("env", lambda: run_child_step(ctx, "env", CAPS["env"]))
    resolve_model(ctx, requested_model)
    timed_step("decoder", lambda: model_step(ctx, "decoder", CAPS["decoder"]))
    timed_step("pytest", lambda: run_pytest(ctx, env.details, CAPS["pytest"]))
    timed_step("logprobs", lambda: model_step(ctx, "logprobs", CAPS["logprobs"]))
    timed_step("lora", lambda: model_step(ctx, "lora", CAPS["lora"]))
    timed_step("train", lambda: run_train(ctx, CAPS["train"]))
    return steps


def summary_of(ctx: Context, steps: list[StepResult], wall: float) -> dict[str, Any]:
    env = steps[0].details if steps and steps[0].name == "env" else {}
    failed = [s.name for s in steps if s.status == "failed"]
    return {
        "passed": not failed,
        "failed": failed,
        "device": ctx.device,
        "quick": ctx.quick,
        "gpu": env.get("gpu"),
        "torch": env.get("torch"),
        "cuda": env.get("cuda"),
        "transformers": env.get("transformers"),
        "peft": env.get("peft"),
        "python": ctx.python,
        "node": shutil.which("node"),
        "model": ctx.model_note,
        "wall_s": round(wall, 1),
        "steps": [asdict(s) for s in steps],
    }


def format_summary(summary: dict[str, Any], json_path: Path) -> str:
    steps = summary["steps"]
    counts = {k: sum(1 for s in steps if s["status"] == k) for k in ("ok", "skipped", "failed")}
    verdict = "PASSED" if summary["passed"] else "FAILED"
    lines = [
        f"== mage GPU check: {verdict} ({counts['ok']} ok, {counts['skipped']} skipped, {counts['failed']} failed) in {summary['wall_s']} s ==",
        f"device {summary['device']}{' (quick dry run)' if summary['quick'] else ''}: {summary['gpu'] or 'no GPU'}; "
        f"torch {summary['torch']} (CUDA {summary['cuda']}); transformers {summary['transformers']}; peft {summary['peft']}",
        f"python {summary['python']}; node {summary['node'] or 'absent'}; model {summary['model']}",
    ]
    for i, s in enumerate(steps, 1):
        text = s["headline"] if s["status"] == "ok" else f"{s['reason']}{' - ' + s['headline'] if s['headline'] else ''}"
        lines.append(f"{'[' + s['status'] + ']':<10}{i} {s['name']:<9}{s['seconds']:>7.1f} s  {text}")
        if s["status"] == "failed" and s.get("log"):
            lines.append(f"{'':<12}log: {s['log']}")
    lines.append(f"JSON: {json_path}")
    return "\n".join(lines)


def json_path_of(args: argparse.Namespace) -> Path:
    """--out when given, else $OUT/gpu-check.json when $OUT is set, else ./gpu-check.json."""
    if args.out:
        return Path(args.out).resolve()
    out_dir = os.environ.get("OUT")
    return (Path(out_dir) / "gpu-check.json").resolve() if out_dir else Path("gpu-check.json").resolve()


def run_check(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    json_path = json_path_of(args)
    logs = json_path.parent / "gpu-check-logs"
    logs.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="mage-gpu-check-") as tmp:
        ctx = Context(
            root=Path(args.root).resolve(),
            python=sys.executable,
            device=args.device,
            quick=args.quick,
            sizes=QUICK if args.quick else FULL,
            logs=logs,
            work=Path(tmp),
            deadline=started + args.budget,
            skip=frozenset(x for x in args.skip.split(",") if x),
        )
        steps = run_steps(ctx, args.model)
        summary = summary_of(ctx, steps, time.perf_counter() - started)
    json_path.write_text(json.dumps(summary, indent=1, default=str) + "\n")
    print(format_summary(summary, json_path), flush=True)
    return 0 if summary["passed"] else 1


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="scripts/gpu-check.sh", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda", help="cuda (default), cuda:N, or cpu for a dry run")
    ap.add_argument("--quick", action="store_true", help="tiny sizes: 1 iteration, few tokens, test_device.py only")
    ap.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        help=f"Hugging Face model directory (default {DEFAULT_MODEL}; a quick run without it, or "
        f"--model {TINY}, uses a tiny random Llama)",
    )
    ap.add_argument("--out", default=None, help="summary JSON path (default $OUT/gpu-check.json, else ./gpu-check.json)")
    ap.add_argument("--budget", type=float, default=460.0, help="overall seconds; a step still running at the end is killed (default 460)")
    ap.add_argument("--skip", default="", help="comma-separated steps to leave out (env, decoder, pytest, logprobs, lora, train)")
    ap.add_argument("--root", default=str(Path(__file__).resolve().parents[2]), help=argparse.SUPPRESS)
    ap.add_argument("--step", choices=list(CHILD_STEPS), default=None, help=argparse.SUPPRESS)
    ap.add_argument("--result", default=None, help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.step is not None:
        return run_child(args)
    return run_check(args)


if __name__ == "__main__":
    sys.exit(main())
