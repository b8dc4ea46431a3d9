"""examples/custom_storage.py: a third-party backend passes the conformance suite."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway_kit.storage import Storage
from gateway_kit.testing.storage import FakeClock, StorageConformance

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "custom_storage.py"
_spec = importlib.util.spec_from_file_location("custom_storage", EXAMPLE)
assert _spec is not None
assert _spec.loader is not None
custom_storage = importlib.util.module_from_spec(_spec)
sys.modules["custom_storage"] = custom_storage  # dataclasses look their module up
_spec.loader.exec_module(custom_storage)


class TestDictStorage(StorageConformance):
    @pytest.fixture
    async def storage(self, clock: FakeClock) -> AsyncIterator[Storage]:
        async with custom_storage.DictStorage(clock=clock) as storage:
            yield storage


def test_it_is_a_storage() -> None:
    assert isinstance(custom_storage.DictStorage(), Storage)
