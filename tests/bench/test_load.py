from __future__ import annotations

import socketserver
import threading
from collections.abc import Iterator, Sequence
from typing import overload

import pytest

from gateway_kit.bench._load import build_request, run_load


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Recorder)
        self.paths: list[str] = []


class _Recorder(socketserver.StreamRequestHandler):
    """Answers every request 200 with an empty body and records its path."""

    server: _Server

    def handle(self) -> None:
        while line := self.rfile.readline():
            length = 0
            while (header := self.rfile.readline()) not in (b"\r\n", b""):
                name, _, value = header.partition(b":")
                if name.lower() == b"content-length":
                    length = int(value)
            self.rfile.read(length)
            self.server.paths.append(line.split()[1].decode())
            self.wfile.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")


@pytest.fixture
def recorder() -> Iterator[tuple[int, list[str]]]:
    server = _Server()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], server.paths
    finally:
        server.shutdown()
        server.server_close()


def _rotation(size: int) -> list[bytes]:
    return [build_request(f"/{i}", b"{}") for i in range(size)]


def test_a_rotation_sends_every_request_once_the_count_covers_it(
    recorder: tuple[int, list[str]],
) -> None:
    port, paths = recorder
    result = run_load(port, _rotation(10), concurrency=4, requests=12)
    assert result.requests == 12
    assert result.errors == 0
    assert set(paths) == {f"/{i}" for i in range(10)}


def test_the_offset_carries_the_rotation_on_from_call_to_call(
    recorder: tuple[int, list[str]],
) -> None:
    port, paths = recorder
    run_load(port, _rotation(8), concurrency=1, requests=3)
    run_load(port, _rotation(8), concurrency=1, requests=3, offset=3)
    assert paths == ["/0", "/1", "/2", "/3", "/4", "/5"]


def test_one_request_is_sent_as_before(recorder: tuple[int, list[str]]) -> None:
    port, paths = recorder
    result = run_load(port, build_request("/only", b"{}"), concurrency=2, requests=4)
    assert result.requests == 4
    assert paths == ["/only"] * 4


class _Lazy(Sequence[bytes]):
    """A rotation far too long to hold, each request made when asked for (slices refused)."""

    def __init__(self) -> None:
        self.asked: list[int] = []

    def __len__(self) -> int:
        return 10**9

    @overload
    def __getitem__(self, index: int) -> bytes: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[bytes]: ...

    def __getitem__(self, index: int | slice) -> bytes | Sequence[bytes]:
        assert isinstance(index, int), "a lazy rotation is never sliced or copied"
        self.asked.append(index)
        return build_request(f"/{index}", b"{}")


def test_a_lazy_rotation_is_asked_for_the_requests_sent_only(
    recorder: tuple[int, list[str]],
) -> None:
    port, paths = recorder
    rotation = _Lazy()
    run_load(port, rotation, concurrency=1, requests=3, offset=5)
    assert rotation.asked == [5, 6, 7]
    assert paths == ["/5", "/6", "/7"]


def test_a_get_request_is_sent_with_its_method(recorder: tuple[int, list[str]]) -> None:
    port, paths = recorder
    request = build_request("/healthz", b"", method="GET")
    assert request.startswith(b"GET /healthz HTTP/1.1\r\n")
    result = run_load(port, request, concurrency=1, requests=2)
    assert (result.requests, result.errors, paths) == (2, 0, ["/healthz", "/healthz"])
