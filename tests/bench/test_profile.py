from __future__ import annotations

from pathlib import Path

import gateway_kit
from gateway_kit.bench._profile import summarize_py_spy, summarize_strace

ROOT = Path(gateway_kit.__file__).resolve().parent
SITE = "/venv/lib/python3.11/site-packages"
LIBC = "/usr/lib/x86_64-linux-gnu/libc.so.6"
LOOP = f"run (/py/lib/python3.11/asyncio/runners.py:86);uv__io_poll ({SITE}/uvloop/loop.so)"
AUTH = f"AuthMiddleware.__call__ ({ROOT}/layers/auth.py:40)"


def _raw(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "raw.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_waits_are_left_out_and_work_is_shared_by_area(tmp_path: Path) -> None:
    raw = _raw(
        tmp_path,
        f"{LOOP};epoll_pwait ({LIBC}) 50",
        f"{LOOP};{AUTH};hash_key ({ROOT}/accounts/keys.py:10) 30",
        f"{LOOP};{AUTH};send ({SITE}/httpx/_client.py:5);write ({LIBC}) 10",
        f"{LOOP};{AUTH};task_step_impl (_asynciomodule.c:1);gc_collect_main (libpython.so) 10",
    )
    summary = summarize_py_spy(raw)
    assert summary.startswith("50 busy samples (50 more waiting")
    areas = summary.split("\n\n")[1]
    assert " 60.0%  gateway_kit.accounts" in areas
    assert " 20.0%  httpx" in areas
    assert " 20.0%  gc" in areas
    assert " 20.0%  write" in summary
    assert "100.0%  AuthMiddleware.__call__" not in summary  # on every sample: says nothing


def test_strace_counts_become_calls_per_request(tmp_path: Path) -> None:
    path = tmp_path / "strace.txt"
    path.write_text(
        "% time     seconds  usecs/call     calls    errors syscall\n"
        "------ ----------- ----------- --------- --------- ----------------\n"
        " 60.00    0.060000           3     20000           write\n"
        " 40.00    0.040000           2     10000      2500 read\n"
        "------ ----------- ----------- --------- --------- ----------------\n"
        "100.00    0.100000           3     30000      2500 total\n"
    )
    summary = summarize_strace(path, 5000).splitlines()
    assert summary == [
        "system calls per request, all threads: 6.0",
        "     4.00  write",
        "     2.00  read",
    ]
