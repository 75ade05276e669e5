"""The prepared GPU check (scripts/gpu-check.sh): on a machine with one NVIDIA GPU, in under 8
minutes, it checks the lean decoder's CUDA graphs against eager steps and times them beside the
Hugging Face sampler (decoder_step.py), runs the worker's pytest suite on CUDA, compares SmolLM2's
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
import sys
from pathlib import Path

from .common import (
    Context as Context,
    DEFAULT_MODEL as DEFAULT_MODEL,
    FULL as FULL,
    KUHN_HANDS as KUHN_HANDS,
    KUHN_SYSTEM as KUHN_SYSTEM,
    LOGP_BOUND as LOGP_BOUND,
    LORA_RANK as LORA_RANK,
    OPTIONAL_PACKAGES as OPTIONAL_PACKAGES,
    PIN_MODULE as PIN_MODULE,
    QUICK as QUICK,
    Sizes as Sizes,
    StepResult as StepResult,
    TINY as TINY,
    TRAIN_CONFIG as TRAIN_CONFIG,
    free_memory as free_memory,
    kuhn_conversation as kuhn_conversation,
    kuhn_prompts as kuhn_prompts,
    kuhn_sequences as kuhn_sequences,
    linear_module_names as linear_module_names,
    make_learner as make_learner,
    peak_gib as peak_gib,
    reset_peak as reset_peak,
    sync as sync,
    timed as timed,
)
from .steps import (
    CHILD_STEPS as CHILD_STEPS,
    has_module as has_module,
    measure_generate as measure_generate,
    measure_update as measure_update,
    nvidia_driver as nvidia_driver,
    pin_mismatches as pin_mismatches,
    run_child as run_child,
    step_env as step_env,
    step_logprobs as step_logprobs,
    step_lora as step_lora,
    train_dtype as train_dtype,
    update_arrays as update_arrays,
)
from .orchestrator import (
    CAPS as CAPS,
    Proc as Proc,
    finish as finish,
    format_summary as format_summary,
    iteration_seconds as iteration_seconds,
    json_path_of as json_path_of,
    junit_counts as junit_counts,
    mean_of as mean_of,
    model_step as model_step,
    no_time as no_time,
    pytest_command as pytest_command,
    python_path as python_path,
    read_jsonl as read_jsonl,
    resolve_model as resolve_model,
    run_check as run_check,
    run_child_step as run_child_step,
    run_logged as run_logged,
    run_pytest as run_pytest,
    run_steps as run_steps,
    run_train as run_train,
    step_budget as step_budget,
    summary_of as summary_of,
    tail as tail,
    tiny_model as tiny_model,
    train_command as train_command,
    train_skip_reason as train_skip_reason,
)


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
    ap.add_argument("--root", default=str(Path(__file__).resolve().parents[3]), help=argparse.SUPPRESS)
    ap.add_argument("--step", choices=list(CHILD_STEPS), default=None, help=argparse.SUPPRESS)
    ap.add_argument("--result", default=None, help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.step is not None:
        return run_child(args)
    return run_check(args)
