"""The storage names at the top of the package, and the package without the redis extra."""

from __future__ import annotations

import subprocess
import sys

import gateway_kit
import gateway_kit.storage
import gateway_kit.testing

STORAGE_NAMES = {
    "ClaimedItem",
    "DeadItem",
    "IncrManyResult",
    "IncrResult",
    "Increment",
    "MemoryStorage",
    "RedisStorage",
    "SQLiteStorage",
    "Storage",
    "Throttle",
    "ThrottleResult",
    "storage_from_url",
}


def test_storage_names_are_exported() -> None:
    assert set(gateway_kit.__all__) >= STORAGE_NAMES
    for name in STORAGE_NAMES:
        assert getattr(gateway_kit, name) is getattr(gateway_kit.storage, name)
    assert gateway_kit.testing.StorageConformance.__name__ == "StorageConformance"


def test_the_package_imports_without_redis() -> None:
    code = (
        "import sys; sys.modules['redis'] = None\n"  # as if the extra were not installed
        "import gateway_kit\n"
        "from gateway_kit import MemoryStorage, SQLiteStorage, storage_from_url\n"
        "try:\n"
        "    gateway_kit.RedisStorage\n"
        "except ImportError:\n"
        "    print('lazy')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "lazy"
