"""Shared benchmark plumbing: server processes on loopback and a lean HTTP/1.1 load generator.

The load generator speaks raw HTTP/1.1 over keep-alive connections (one per unit of
concurrency), so its own overhead is small and the same for every target measured. A target may
be given several prebuilt requests (one per API key, say): each connection cycles through them
from its own offset, still writing prebuilt bytes, with no formatting per request. A sequence
may also make its requests when they are asked for (``__getitem__``), before the clock starts:
a rotation of thousands of large requests need not be held in memory.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def server_process(
    module_args: Sequence[str],
    port: int,
    *,
    stop: signal.Signals = signal.SIGTERM,
    pythonpath: str | None = None,
    cpus: set[int] | None = None,
) -> Iterator[int]:
    """Start ``python -m <module_args>`` and wait until ``port`` accepts; yield its pid.

    ``stop`` is the signal that ends it: uvicorn shuts down on SIGTERM, then raises it again
    and dies by it, so code that must run at exit (cProfile writing its file) wants SIGINT.
    ``pythonpath`` puts another checkout's ``gateway_kit`` first (a baseline to compare with).
    ``cpus`` pins it to those CPUs (Linux), away from the load's client.

    Its stdout (where uvicorn writes the access log) goes to ``/dev/null``; its stderr to a
    temporary file, shown if it fails to start (a pipe nobody reads would stall a chatty
    server once full).
    """
    with tempfile.TemporaryFile() as errors:
        process = subprocess.Popen(
            [sys.executable, "-m", *module_args],
            stdout=subprocess.DEVNULL,
            stderr=errors,
            env={
                **os.environ,
                "PYTHONUNBUFFERED": "1",
                **({"PYTHONPATH": pythonpath} if pythonpath else {}),
            },
            # `python -m` puts the working directory first on sys.path, before PYTHONPATH:
            # started from this checkout, the baseline would import this checkout's code.
            cwd=pythonpath,
            preexec_fn=None if cpus is None else lambda: os.sched_setaffinity(0, cpus),
        )
        try:
            _wait_for_port(process, port, errors, " ".join(module_args))
            yield process.pid
        finally:
            process.send_signal(stop)
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_for_port(
    process: subprocess.Popen[bytes], port: int, errors: IO[bytes], name: str
) -> None:
    deadline = time.monotonic() + 30
    while True:
        if process.poll() is not None:
            errors.seek(0)
            raise RuntimeError(f"{name} exited: {errors.read().decode(errors='replace')[-2000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not start") from None
            time.sleep(0.05)


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time the process (all its threads) has used; 0 without /proc."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            # Fields after the command name (which may hold spaces), from the 3rd field on.
            fields = stat.read().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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
    #: The status of each request answered with another status than 200, in arrival order.
    error_statuses: tuple[int, ...] = ()

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
    requests: Sequence[bytes],
    start: int,
    count: int,
    latencies: list[float],
    errors: list[int],
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    size = len(requests)
    try:
        for index in range(start, start + count):
            request = requests[index % size]
            started = time.perf_counter()
            writer.write(request)
            status = await _read_response(reader)
            latencies.append(time.perf_counter() - started)
            if status != 200:
                errors.append(status)
    finally:
        writer.close()


def build_request(
    path: str, body: bytes, headers: Sequence[tuple[str, str]] = (), *, method: str = "POST"
) -> bytes:
    lines = [
        f"{method} {path} HTTP/1.1",
        "Host: 127.0.0.1",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
        *(f"{name}: {value}" for name, value in headers),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def run_load(
    port: int,
    request: bytes | Sequence[bytes],
    *,
    concurrency: int,
    requests: int,
    offset: int = 0,
) -> LoadResult:
    """Send ``requests`` requests over ``concurrency`` keep-alive connections.

    ``request`` is one prebuilt request, or a sequence to rotate through (which may build each
    request when asked for it, before the request's clock starts): connection ``i`` starts
    at ``offset + i * len(request) // concurrency`` and cycles on, so that together they touch
    every request once as soon as ``requests >= len(request)`` (rounded up to a multiple of
    ``concurrency``). Pass a growing ``offset`` to carry the rotation on from call to call.
    """
    rotation = [request] if isinstance(request, bytes) else request
    size = len(rotation)
    starts = [(offset + i * size // concurrency) % size for i in range(concurrency)]

    async def main() -> LoadResult:
        latencies: list[float] = []
        errors: list[int] = []
        per_worker = max(1, requests // concurrency)
        workers = [
            _worker(port, rotation, start, per_worker, latencies, errors) for start in starts
        ]
        started = time.perf_counter()
        await asyncio.gather(*workers)
        seconds = time.perf_counter() - started
        return LoadResult(
            concurrency, len(latencies), len(errors), seconds, tuple(latencies), tuple(errors)
        )

    try:
        import uvloop

        return uvloop.run(main())
    except ImportError:  # pragma: no cover - uvloop is part of the server extra
        return asyncio.run(main())


def delete_redis_prefix(url: str, prefix: str) -> int:
    """Delete every key under ``prefix`` (in batches, never FLUSHDB); return how many."""
    import redis

    client = redis.Redis.from_url(url)
    deleted = 0
    try:
        batch: list[bytes] = []
        for key in client.scan_iter(match=f"{prefix}*", count=1000):
            batch.append(key)
            if len(batch) == 1000:
                deleted += client.unlink(*batch)
                batch.clear()
        if batch:
            deleted += client.unlink(*batch)
    finally:
        client.close()
    return deleted
