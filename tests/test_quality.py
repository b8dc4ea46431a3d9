"""Lint and types are part of the suite: ruff on everything, mypy --strict on gateway_kit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


def run(*args: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_lint() -> None:
    run("ruff", "check", "gateway_kit", "tests", "examples")


def test_ruff_format() -> None:
    run("ruff", "format", "--check", "gateway_kit", "tests", "examples")


def test_mypy_strict() -> None:
    run("mypy", "--strict", "gateway_kit")
