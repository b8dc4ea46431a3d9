"""The public API is what __all__ says (the httpx pattern)."""

from __future__ import annotations

import gateway_kit
import gateway_kit.testing


def _ruff_order(name: str) -> tuple[int, str]:
    """ruff's RUF022 order: CONSTANTS, then Classes, then the rest, each alphabetical."""
    if name.isupper() and len(name) > 1:
        return 0, name
    return (1 if name[0].isupper() else 2), name


def test_all_matches_the_public_names() -> None:
    for module in (gateway_kit, gateway_kit.testing):
        public = {
            name
            for name, value in vars(module).items()
            if not name.startswith("_")
            and getattr(value, "__module__", "").startswith("gateway_kit")
        }
        assert public <= set(module.__all__), public - set(module.__all__)
        assert module.__all__ == sorted(module.__all__, key=_ruff_order)
        for name in module.__all__:
            assert hasattr(module, name), name
