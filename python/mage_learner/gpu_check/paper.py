"""The GPU check's `paper` step: `configs/experiments/kuhn-gpu-paper.yaml` (a warm start on the
device, then MAGE and GRPO from it, 64 trials × 3 attempts an iteration, each evaluated against
CFR) run by `mage experiment` with the time the check has left, its summaries and `mage report`'s
results document written beside the check's JSON so that they come back from a GPU machine."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from .common import Context, StepResult

PAPER_CONFIG = "configs/experiments/kuhn-gpu-paper.yaml"
# Seconds a full-size run spends outside its time-boxed iterations: the warm start (SFT and its
# 64 check trials), and per method the worker's start and the final evaluation (2 cells × 64).
WARM_START_S = 120.0
PER_METHOD_S = 75.0
QUICK_WARM_START = {"steps": 2, "corpusTrials": 4, "evalTrials": 2, "evalBatch": 2, "batchTokens": 512}
QUICK_SETS = ["rollout.tasksPerIteration=1", "rollout.maxResponseTokens=8", "train.iterations=1", "eval.finalTrials=2"]


def cli(root: Path) -> list[str]:
    """The mage CLI: the build when there is one, else the TypeScript sources through tsx."""
    built = root / "dist" / "cli" / "main.js"
    return ["node", str(built)] if built.is_file() else ["node", "--import", "tsx", str(root / "src" / "cli" / "main.ts")]


def minutes_per_method(limit: float, methods: int) -> float:
    """Each method's `train.maxMinutes`: what the step's limit leaves after the fixed costs."""
    return round(max(0.25, (limit - WARM_START_S - methods * PER_METHOD_S) / methods / 60), 2)


def paper_spec(ctx: Context, template: dict[str, Any], out: Path, limit: float) -> dict[str, Any]:
    """The committed experiment with this check's model, device, folders and time box."""
    spec: dict[str, Any] = json.loads(json.dumps(template))
    spec["runsDir"] = str(ctx.work / "paper-runs")
    spec["pretrainedDir"] = str(ctx.work / "paper-pretrained")
    spec["resultsDir"] = str(out)
    dtype = "bfloat16" if ctx.device.startswith("cuda") else "float32"
    warm = {**spec.get("warmStart", {}), "device": ctx.device, "dtype": dtype}
    replaced = ("model.torch.path=", "model.torch.device=", "model.torch.dtype=", "train.maxMinutes=")
    sets = [s for s in spec.get("set", []) if not s.startswith(replaced)]
    sets += [f"model.torch.path={ctx.model}", f"model.torch.device={ctx.device}", f"model.torch.dtype={dtype}"]
    sets.append(f"train.maxMinutes={minutes_per_method(limit, len(spec['methods']))}")
    if ctx.quick:
        warm.update(QUICK_WARM_START)
        sets += QUICK_SETS
        for m in spec["methods"]:
            m["set"] = [*m.get("set", []), "rollout.groupSize=2"]
    spec["warmStart"] = warm
    spec["set"] = sets
    return spec


def summaries(results: Path) -> dict[str, dict[str, Any]]:
    return {p.stem: json.loads(p.read_text()) for p in sorted(results.glob("*-s*.json"))}


def cell_score(cell: dict[str, Any]) -> float | None:
    """Mean final score of an evaluation cell (chips in Kuhn)."""
    final = cell.get("metrics", {}).get("final")
    return round(float(final["mean"]), 3) if isinstance(final, dict) and "mean" in final else None


def describe_run(name: str, s: dict[str, Any]) -> dict[str, Any]:
    history = s.get("history", [])
    walls = [float(h["wall_s"]) for h in history if "wall_s" in h]
    cells = (s.get("finalEval") or {}).get("cells", [])
    return {
        "run": name,
        "iterations": s.get("iterationsDone"),
        "seconds_per_iteration": round(walls[-1] / len(walls), 1) if walls else None,
        "cfr": {f"{c.get('opponent')}/{c.get('seat')}": cell_score(c) for c in cells},
    }


def run_paper(ctx: Context, limit: float, run_logged: Any, finish: Any) -> StepResult:
    """`mage experiment` on the paper config, then `mage report` of its results."""
    import yaml  # type: ignore[import-untyped]  # PyYAML ships no stubs; transformers installs it

    out = ctx.logs.parent / "paper"
    results = out / "experiments"
    template = yaml.safe_load((ctx.root / PAPER_CONFIG).read_text())
    spec = paper_spec(ctx, template, results, limit)
    spec_file = ctx.work / "kuhn-gpu-paper.yaml"
    spec_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    log = ctx.logs / "paper.log"
    env = {"MAGE_PYTHON": ctx.python}
    proc = run_logged([*cli(ctx.root), "experiment", str(spec_file)], log, limit, ctx.root, env)
    r: StepResult = finish("paper", proc, log, ctx, limit)
    runs = summaries(results / spec["name"])
    if runs:
        report_log = ctx.logs / "paper-report.log"
        run_logged([*cli(ctx.root), "report", str(results), "--out", str(out / "results.md")], report_log, 120, ctx.root, env)
    described = [describe_run(n, s) for n, s in runs.items()]
    r.details = {"config": spec, "runs": described, "results": str(out.relative_to(ctx.logs.parent))}
    if r.status == "ok" and len(runs) < len(spec["methods"]):
        r.status, r.reason = "failed", f"{len(runs)} of {len(spec['methods'])} runs wrote a summary"
    r.headline = "; ".join(f"{d['run']}: {d['iterations']} it, {d['seconds_per_iteration']} s/it, vs CFR {d['cfr']}" for d in described) or "no run finished"
    return r
