"""Measuring against another commit in the same run: ``--baseline CHECKOUT``.

Each gateway-kit target gets a twin, ``<name> [baseline]``, started with the checkout's
``gateway_kit`` first on ``PYTHONPATH`` (so its own code serves the same role, with the same
arguments), and measured interleaved with the others. The verdict is the issue's "no regression
beyond noise": p50 at c=1 within 0.05 ms, req/s at c=32 within 5 %. ``worktree`` makes such a
checkout of a commit for the length of a run, when none is given.
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from gateway_kit.bench._load import free_port

if TYPE_CHECKING:
    from gateway_kit.bench.proxy import Target, TargetResult

__all__ = ["SUFFIX", "against_baseline", "twins", "worktree"]

SUFFIX = " [baseline]"
#: The noise a change may stay within: added p50 at c=1 (ms), and the c=32 req/s ratio.
P50_NOISE_MS = 0.05
RPS_NOISE = 0.95


def twins(targets: Iterable[Target], checkout: str) -> list[Target]:
    """A baseline twin of each target, on a port (and with a key file) of its own."""
    root = str(Path(checkout).resolve())
    made = []
    for target in targets:
        assert target.command is not None
        port = free_port()
        command = [str(port) if part == str(target.port) else part for part in target.command]
        key_file = target.key_file
        if key_file is not None:
            twin_file = key_file.with_name(f"{port}{key_file.suffix}")
            command = [str(twin_file) if part == str(key_file) else part for part in command]
            key_file = twin_file
        if "--port" not in command:  # gateway-kit serve --config: the port is in the file
            command += ["--port", str(port)]
        made.append(
            replace(
                target,
                name=target.name + SUFFIX,
                port=port,
                command=command,
                key_file=key_file,
                pythonpath=root,
            )
        )
    return made


def against_baseline(results: Mapping[str, TargetResult]) -> list[str]:
    """Each target against its twin: the change's p50 at c=1 and req/s at c=32."""
    lines = []
    for name, base in results.items():
        if not name.endswith(SUFFIX):
            continue
        new = results[name.removesuffix(SUFFIX)]
        added = new.runs[1].p50 - base.runs[1].p50
        ratio = new.runs[32].rps / base.runs[32].rps
        verdict = "PASS" if added <= P50_NOISE_MS and ratio >= RPS_NOISE else "FAIL"
        lines.append(
            f"{new.name} against the baseline: {added:+.3f} ms p50 at c=1 (noise "
            f"{P50_NOISE_MS}), {ratio:.2f}x its req/s at c=32 (noise {RPS_NOISE}): {verdict}"
        )
    return lines


@contextmanager
def worktree(commit: str) -> Iterator[str]:
    """A checkout of ``commit`` of this repository (``git worktree add --detach`` in a temporary
    directory), removed afterwards; this checkout's branch, index and files are left alone."""
    repository = str(Path(__file__).resolve().parents[2])
    with tempfile.TemporaryDirectory(prefix="gk-baseline-") as scratch:
        path = str(Path(scratch) / commit)
        git = ["git", "-C", repository, "worktree"]
        subprocess.run([*git, "add", "--detach", "--quiet", path, commit], check=True)
        try:
            yield path
        finally:
            subprocess.run([*git, "remove", "--force", path], check=False)
