"""Shared benchmark plumbing: server processes on loopback and a lean HTTP/1.1 load generator.

The load generator speaks raw HTTP/1.1 over keep-alive connections (one per unit of
concurrency), so its own overhead is small and the same for every target measured.
"""

from __future__ import annotations

import asyncio
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def server_process(module_args: Sequence[str], port: int) -> Iterator[int]:
    """Start ``python -m <module_args>`` and wait until ``port`` accepts; yield its pid."""
    process = subprocess.Popen(
        [sys.executable, "-m", *module_args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            if process.poll() is not None:
                error = process.stderr.read().decode() if process.stderr else ""
                raise RuntimeError(f"{' '.join(module_args)} exited: {error[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{' '.join(module_args)} did not start") from None
                time.sleep(0.05)
        yield process.pid
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()


def peak_rss_mib(pid: int) -> float:
    """The process's peak resident set size (VmHWM), in MiB; 0 where /proc is missing."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


@dataclass(frozen=True, slots=True)
class LoadResult:
    concurrency: int
    requests: int
    errors: int
    seconds: float
    latencies: tuple[float, ...]

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    def percentile(self, p: float) -> float:
        """Latency percentile in milliseconds."""
        if not self.latencies:
            return 0.0
        ordered = sorted(self.latencies)
        index = min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))
        return ordered[index] * 1000

    @property
    def p50(self) -> float:
        return statistics.median(self.latencies) * 1000 if self.latencies else 0.0

    @property
    def p99(self) -> float:
        return self.percentile(99)


async def _read_response(reader: asyncio.StreamReader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length = -1
    chunked = False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value)
        elif name == b"transfer-encoding" and b"chunked" in value.lower():
            chunked = True
    if chunked:
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            await reader.readexactly(size + 2)
            if size == 0:
                break
    elif length >= 0:
        await reader.readexactly(length)
    return status


async def _worker(
    port: int,
    request: bytes,
    count: int,
    latencies: list[float],
    errors: list[int],
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for _ in range(count):
            started = time.perf_counter()
            writer.write(request)
            status = await _read_response(reader)
            latencies.append(time.perf_counter() - started)
            if status != 200:
                errors.append(status)
    finally:
        writer.close()


def build_request(path: str, body: bytes, headers: Sequence[tuple[str, str]] = ()) -> bytes:
    lines = [
        f"POST {path} HTTP/1.1",
        "Host: 127.0.0.1",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
        *(f"{name}: {value}" for name, value in headers),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def run_load(port: int, request: bytes, *, concurrency: int, requests: int) -> LoadResult:
    """Send ``requests`` requests over ``concurrency`` keep-alive connections."""

    async def main() -> LoadResult:
        latencies: list[float] = []
        errors: list[int] = []
        per_worker = max(1, requests // concurrency)
        started = time.perf_counter()
        await asyncio.gather(
            *(_worker(port, request, per_worker, latencies, errors) for _ in range(concurrency))
        )
        seconds = time.perf_counter() - started
        return LoadResult(concurrency, len(latencies), len(errors), seconds, tuple(latencies))

    try:
        import uvloop

        return uvloop.run(main())
    except ImportError:  # pragma: no cover - uvloop is part of the server extra
        return asyncio.run(main())
