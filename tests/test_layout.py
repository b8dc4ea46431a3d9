"""The tree reads as the architecture: lower folders never import higher ones.

The order, lowest first (DESIGN.md section 3b): the foundations (errors, the SSE format, the
private ASGI plumbing), storage, configuration, events, accounts, cost, providers, webhooks,
payments, routing, the answer cache's state and observability's, the ``Gateway`` that owns them, the
operator's actions on it (``admin``), the request pipeline, the chat route, the policy
layers, the stack that orders them, the management API, the app that mounts it all, and the
tools on top (CLI, benchmarks, testing helpers). A module may import its own level and any
level below, never above.
"""

from __future__ import annotations

import ast
from pathlib import Path

import gateway_kit

PACKAGE = Path(gateway_kit.__file__).parent

LEVELS: list[set[str]] = [
    {"exceptions", "_ttl", "_memo", "_clock", "_text", "sse", "_asgi"},
    {"storage"},
    {"config"},
    {"events"},
    {"accounts"},
    {"cost"},
    {"providers"},
    {"webhooks", "payments", "routing", "cache", "observe"},
    {"gateway"},
    {"admin"},
    {"pipeline"},
    {"chat"},
    {"layers"},
    {"stack"},
    {"api", "dashboard"},
    {"app"},
    {"cli", "bench", "testing"},
]
LEVEL = {name: index for index, names in enumerate(LEVELS) for name in names}


def unit(module: str) -> str:
    """``gateway_kit.accounts.keys`` -> ``accounts``; the root package itself -> ``""``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name.startswith("gateway_kit.")}


def test_every_top_level_module_and_folder_has_a_level() -> None:
    names = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    names |= {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert names == set(LEVEL), names ^ set(LEVEL)


def test_no_module_imports_a_higher_level() -> None:
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).with_suffix("")
        if relative.parts == ("__init__",):
            continue  # the public API re-exports everything
        own = LEVEL[relative.parts[0]]
        for module in imports(path):
            target = unit(module)
            if target and LEVEL[target] > own:
                wrong.append(f"{'/'.join(relative.parts)} imports {module}")
    assert wrong == []
