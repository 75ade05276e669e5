"""The virtual environment holds exactly the pinned versions the worker and adapters are written for."""

from pathlib import Path

import numpy
import peft
import safetensors
import tensorboard
import torch
import transformers
import wandb


def pinned() -> dict[str, str]:
    out: dict[str, str] = {}
    for line in (Path(__file__).parents[1] / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if "==" in line:
            name, version = line.split("==")
            out[name.lower()] = version
    return out


def test_installed_versions_match_the_pins() -> None:
    pins = pinned()
    installed = {
        "torch": torch.__version__.split("+")[0],
        "transformers": transformers.__version__,
        "peft": peft.__version__,
        "safetensors": safetensors.__version__,
        "numpy": numpy.__version__,
        "wandb": wandb.__version__,
        "tensorboard": tensorboard.__version__,
    }
    for name, version in installed.items():
        assert pins[name] == version, f"{name} {version} installed, {pins[name]} pinned"
