"""Real gateway processes for end-to-end tests: `gateway-kit serve` in a child process."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def serving(*args: str, cwd: Path) -> Iterator[tuple[list[str], str]]:
    """Run `gateway-kit serve` in a child process; yield (its output lines so far, base URL)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_KIT_")}
    process = subprocess.Popen(
        [sys.executable, "-m", "gateway_kit.cli", "serve", "--port", str(port), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=cwd,
    )
    assert process.stdout is not None
    output: list[str] = []
    try:
        # uvicorn announces the bound socket once the lifespan has started.
        while not any("Uvicorn running on" in line for line in output):
            line = process.stdout.readline()
            if not line:
                raise AssertionError("the server exited:\n" + "".join(output))
            output.append(line)
        yield output, f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(10)
