"""Several OS processes on one SQLite file or one Redis: limits, queue leases, restarts."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gateway_kit.storage import Storage, storage_from_url

pytestmark = [pytest.mark.slow, pytest.mark.anyio]

HELPER = Path(__file__).with_name("_proc.py")


@dataclass
class Target:
    url: str
    options: dict[str, Any] = field(default_factory=dict)

    def argv(self, *args: object, clock_offset: float = 0.0) -> list[str]:
        argv = [sys.executable, str(HELPER), self.url]
        if "prefix" in self.options:
            argv += ["--prefix", self.options["prefix"]]
        if clock_offset:
            argv += ["--clock-offset", str(clock_offset)]
        return argv + [str(a) for a in args]

    def storage(self) -> Storage:
        return storage_from_url(self.url, **self.options)

    @property
    def server_clock(self) -> bool:
        return self.url.startswith("redis")


@pytest.fixture(params=["sqlite", pytest.param("redis", marks=pytest.mark.redis)])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Target:
    if request.param == "sqlite":
        return Target(f"sqlite:///{tmp_path}/state.db")
    url = request.getfixturevalue("redis_url")
    return Target(url, {"prefix": request.getfixturevalue("redis_prefix")})


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def start(processes: list[subprocess.Popen[str]], argv: list[str]) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    processes.append(proc)
    return proc


def start_together(
    processes: list[subprocess.Popen[str]], argvs: list[list[str]]
) -> list[subprocess.Popen[str]]:
    """Start a process for each of ``argvs``; once every one says it is ready, tell them all
    to go (a start time agreed in advance failed on a busy machine: a process still starting
    when the other had done all the work)."""
    procs = [start(processes, argv) for argv in argvs]
    for proc in procs:
        assert first_line(proc) == "ready"
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    return procs


def result(proc: subprocess.Popen[str]) -> Any:
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return json.loads(out)


def first_line(proc: subprocess.Popen[str]) -> Any:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, proc.stderr.read() if proc.stderr else ""
    return json.loads(line)


def kill(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL


async def test_the_limit_holds_across_two_processes(
    target: Target, processes: list[subprocess.Popen[str]]
) -> None:
    procs = start_together(processes, [target.argv("incr", "ws_1:c", 100, 5)] * 2)
    assert sum(result(p) for p in procs) == 5
    async with target.storage() as storage:
        assert await storage.get("ws_1:c") == b"5"


async def test_two_workers_in_two_processes_claim_disjoint_items(
    target: Target, processes: list[subprocess.Popen[str]]
) -> None:
    async with target.storage() as storage:
        for i in range(30):
            await storage.enqueue("jobs", f"job{i:02}", b"p", due_at=0)
    procs = start_together(processes, [target.argv("drain", "jobs")] * 2)
    first, second = (result(p) for p in procs)
    assert not set(first) & set(second)
    assert sorted(first + second) == [f"job{i:02}" for i in range(30)]
    assert first  # both took part
    assert second


async def test_a_killed_workers_item_is_claimed_again_and_its_token_fenced(
    target: Target, processes: list[subprocess.Popen[str]]
) -> None:
    async with target.storage() as storage:
        await storage.enqueue("jobs", "job", b"p", due_at=0)
    # SQLite: a long lease, and the next worker's clock set past it (no waiting). Redis keeps
    # the server's time: a short lease that really lapses.
    lease = 0.5 if target.server_clock else 30.0
    worker = start(processes, target.argv("hold", "jobs", lease))
    held = first_line(worker)
    kill(worker)
    offset = 0.0 if target.server_clock else lease + 1
    report = result(
        start(processes, target.argv("report", "ws_1:none", "jobs", 5, clock_offset=offset))
    )
    [again] = report["claimed"]
    assert (again["item_id"], again["attempts"]) == ("job", 2)
    assert again["token"] > held["token"]
    async with target.storage() as storage:
        assert not await storage.ack("jobs", held["token"])
        assert await storage.ack("jobs", again["token"])


async def test_counters_and_queued_items_survive_a_killed_process(
    target: Target, processes: list[subprocess.Popen[str]]
) -> None:
    writer = start(processes, target.argv("fill", "ws_1:c", 7, "jobs", 3))
    assert first_line(writer) == "ready"
    kill(writer)
    report = result(start(processes, target.argv("report", "ws_1:c", "jobs", 0)))
    assert report["value"] == 7
    assert sorted(c["item_id"] for c in report["claimed"]) == ["item0", "item1", "item2"]


async def test_processes_opening_a_new_file_at_once_all_get_in(
    tmp_path: Path, processes: list[subprocess.Popen[str]]
) -> None:
    target = Target(f"sqlite:///{tmp_path}/new.db")  # switching it to WAL mode races
    procs = start_together(processes, [target.argv("incr", "ws_1:c", 1, 100)] * 6)
    assert [result(p) for p in procs] == [1] * 6
