"""The README's Python snippets are whole programs a reader can paste: each parses, names
nothing it does not define or import, and imports gateway-kit's public names only (those in
the ``__all__`` of a module without a private part in its path)."""

from __future__ import annotations

import ast
import builtins
import importlib
import re
from pathlib import Path

import pytest

README = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
SNIPPETS = re.findall(r"```python\n(.*?)```", README, flags=re.DOTALL)


def test_there_are_snippets() -> None:
    assert len(SNIPPETS) >= 4


@pytest.mark.parametrize("source", SNIPPETS, ids=lambda s: s.strip().splitlines()[0][:60])
def test_a_snippet_is_complete_and_imports_public_names(source: str) -> None:
    tree = ast.parse(source)
    defined = set(dir(builtins))
    for node in ast.walk(tree):
        module = node.module if isinstance(node, ast.ImportFrom) else None
        if module is not None and module.startswith("gateway_kit"):
            assert not any(part.startswith("_") for part in module.split(".")), module
            missing = {a.name for a in node.names} - set(importlib.import_module(module).__all__)
            assert not missing, f"not public in {module}: {missing}"
        if isinstance(node, ast.Import | ast.ImportFrom):
            defined |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            defined.add(node.name)
            if not isinstance(node, ast.ClassDef):
                defined |= {a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)}
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            defined.add(node.id)
        elif isinstance(node, ast.comprehension):
            defined |= {n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)}
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    assert used <= defined, f"used but never defined or imported: {sorted(used - defined)}"
