"""Real gateway processes for end-to-end tests: `gateway-kit serve` in a child process."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def launched(
    *args: str, ready: str, cwd: Path
) -> Iterator[tuple[subprocess.Popen[str], list[str]]]:
    """Run ``python -m gateway_kit.cli ARGS`` until it prints ``ready``; yield (process, output).

    On exit the process is terminated if it still runs (a test may have killed it already).
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_KIT_")}
    process = subprocess.Popen(
        [sys.executable, "-m", "gateway_kit.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=cwd,
    )
    assert process.stdout is not None
    output: list[str] = []
    try:
        while not any(ready in line for line in output):
            line = process.stdout.readline()
            if not line:
                raise AssertionError(f"{args[0]} exited:\n" + "".join(output))
            output.append(line)
        # Keep draining, or a chatty child blocks once the pipe buffer is full.
        threading.Thread(target=output.extend, args=(process.stdout,), daemon=True).start()
        yield process, output
    finally:
        if process.poll() is None:
            process.terminate()
        process.wait(10)


@contextmanager
def serving(*args: str, cwd: Path) -> Iterator[tuple[list[str], str]]:
    """Run `gateway-kit serve` in a child process; yield (its output lines so far, base URL)."""
    port = free_port()
    # uvicorn announces the bound socket once the lifespan has started.
    with launched("serve", "--port", str(port), *args, ready="Uvicorn running on", cwd=cwd) as (
        _,
        output,
    ):
        yield output, f"http://127.0.0.1:{port}"
