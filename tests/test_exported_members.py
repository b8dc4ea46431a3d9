"""The public API is what __all__ says (the httpx pattern)."""

from __future__ import annotations

import gateway_kit
import gateway_kit.testing


def test_all_matches_the_public_names() -> None:
    for module in (gateway_kit, gateway_kit.testing):
        public = {
            name
            for name, value in vars(module).items()
            if not name.startswith("_")
            and getattr(value, "__module__", "").startswith("gateway_kit")
        }
        assert public <= set(module.__all__), public - set(module.__all__)
        assert module.__all__ == sorted(
            module.__all__, key=str.casefold
        ) or module.__all__ == sorted(module.__all__)
        for name in module.__all__:
            assert hasattr(module, name), name
