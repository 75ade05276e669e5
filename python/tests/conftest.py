"""Shared fixtures: tiny models built once per session; `--device cuda` (or MAGE_TEST_DEVICE=cuda)
runs the device tests (test_replay, test_device) on CUDA in bfloat16; MAGE_TEST_DTYPE overrides
the dtype (e.g. bfloat16 on CPU)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from mage_learner.tiny import QWEN3_LIKE, build_model  # noqa: E402


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--device", default=os.environ.get("MAGE_TEST_DEVICE", "cpu"), help="cpu or cuda")


@pytest.fixture(scope="session")
def device(request: pytest.FixtureRequest) -> str:
    return str(request.config.getoption("--device"))


@pytest.fixture(scope="session")
def dtype(device: str) -> str:
    return os.environ.get("MAGE_TEST_DTYPE") or ("bfloat16" if device.startswith("cuda") else "float32")


@pytest.fixture(scope="session")
def llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_model(tmp_path_factory.mktemp("llama"), "llama")


@pytest.fixture(scope="session")
def qwen3_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_model(tmp_path_factory.mktemp("qwen3"), "qwen3", template=QWEN3_LIKE)
