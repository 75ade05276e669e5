"""The GPU check's orchestrator: each step in its own process under a time limit, then one summary."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .common import Context, FULL, LORA_RANK, OPTIONAL_PACKAGES, PIN_MODULE, QUICK, StepResult, TINY, TRAIN_CONFIG
from .paper import run_paper
from .steps import train_dtype


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

    from ..tiny import build_model

    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # keep the terminal for the summary
    return build_model(ctx.work / "tiny-llama", "llama")


def model_step(ctx: Context, name: str, cap: float) -> StepResult:
    if ctx.model is None:
        return StepResult(name, "skipped", reason=ctx.model_note)
    return run_child_step(ctx, name, cap)


# Caps in seconds per step at full size; all of them also stop at the run's overall deadline.
CAPS = {"env": 60.0, "pytest": 150.0, "decoder": 120.0, "logprobs": 60.0, "lora": 90.0, "train": 300.0, "paper": 900.0}


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
    timed_step("paper", lambda: paper_step(ctx, CAPS["paper"]))
    return steps


def paper_step(ctx: Context, cap: float) -> StepResult:
    if ctx.model is None:
        return StepResult("paper", "skipped", reason=ctx.model_note)
    if shutil.which("node") is None:
        return StepResult("paper", "skipped", reason="node is not on PATH: the TypeScript trainer cannot run here")
    limit = step_budget(ctx, cap)
    if limit < 30:
        return no_time("paper")
    return run_paper(ctx, limit, run_logged, finish)


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
