"""Where a server process spends its time under load: py-spy or strace from outside, cProfile in.

py-spy (``pip install py-spy``; not a dependency) attaches to the running server by pid and
samples its threads' stacks, native frames included: the server runs exactly as it was started
and a busy sample is CPU time (samples waiting in epoll, poll or on a lock are left out). The
summary gives the share of busy samples per area (the package of the innermost Python frame:
``uvicorn``, ``httpx``, ``gateway_kit.layers``...; ``gc`` when a collection is under way), per
area on the stack, per libc function at the leaf (system calls such as ``write``), then the top
functions by self time and by cumulative time.

strace (``-c -f``) counts the system calls of every thread: divided by the requests sent, they
say how many ``write``, ``read`` or ``getpid`` calls a request costs (strace slows each call, so
only the counts mean anything).

cProfile is the fallback: the server must then be started under it (``cprofile_command``); it
writes its statistics when the server exits, and its cost per call inflates small functions and
async code most.
"""

from __future__ import annotations

import io
import pstats
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "attached",
    "cprofile_command",
    "py_spy_command",
    "py_spy_path",
    "strace_command",
    "summarize_pstats",
    "summarize_py_spy",
    "summarize_strace",
]

#: Where gateway_kit's source lives (an editable install is not under site-packages).
_SOURCE_ROOT = f"{Path(__file__).resolve().parents[2]}/"
#: System calls and libc functions a thread waits in.
_WAITS = frozenset(
    {
        "epoll_wait",
        "epoll_pwait",
        "epoll_pwait2",
        "poll",
        "ppoll",
        "select",
        "pselect",
        "nanosleep",
        "clock_nanosleep",
        "pthread_cond_wait",
        "pthread_cond_timedwait",
        "sem_wait",
        "sem_timedwait",
        "sem_clockwait",
    }
)
#: Frames on (nearly) every sample, such as runpy and the event loop's ``run``, say nothing.
_EVERYWHERE = 0.98


def py_spy_path() -> str | None:
    """The py-spy executable: next to this interpreter, else on ``PATH``."""
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")


def py_spy_command(pid: int, output: Path, *, rate: int = 250) -> list[str]:
    """py-spy sampling ``pid``'s threads, native frames included, raw stacks to ``output``."""
    executable = py_spy_path()
    if executable is None:
        raise RuntimeError("py-spy is not installed: pip install py-spy")
    command = [executable, "record", "--pid", str(pid), "--rate", str(rate), "--format", "raw"]
    return [*command, "--function", "--full-filenames", "--native", "--output", str(output)]


def strace_command(pid: int, output: Path) -> list[str]:
    """strace counting the system calls of every thread of ``pid`` (``-c``) into ``output``."""
    executable = shutil.which("strace")
    if executable is None:
        raise RuntimeError("strace is not installed")
    return [executable, "-c", "-f", "-p", str(pid), "-o", str(output)]


@contextmanager
def attached(command: Sequence[str], output: Path) -> Iterator[None]:
    """Run a tool that attaches to a process (py-spy, strace) while the block runs.

    Both write their output when interrupted, as on Ctrl-C.
    """
    tool = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(1.0)  # attaching takes a moment
    if tool.poll() is not None:
        failure = tool.stderr.read().decode() if tool.stderr else ""
        raise RuntimeError(f"{command[0]} failed: {failure.strip()[-1000:]}")
    try:
        yield
    finally:
        tool.send_signal(signal.SIGINT)
        _, error = tool.communicate(timeout=60)
        if not output.exists():
            raise RuntimeError(f"{command[0]} wrote nothing: {error.decode().strip()[-1000:]}")


def cprofile_command(module_args: Sequence[str], output: Path) -> list[str]:
    """``module_args`` (``python -m`` arguments) run under cProfile, statistics to ``output``."""
    return ["cProfile", "-o", str(output), "-m", *module_args]


# -- py-spy's raw output: one "frame;frame;...;leaf count" line per distinct stack -----------


def _read_stacks(path: Path) -> list[tuple[list[str], int]]:
    stacks = []
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            stacks.append((stack.split(";"), int(count)))
    return stacks


def _location(frame: str) -> tuple[str, str]:
    """``"name (path:line)"`` -> (name, path)."""
    name, _, rest = frame.partition(" (")
    return name, rest.rstrip(")").rpartition(":")[0] or rest.rstrip(")")


def _is_python(frame: str) -> bool:
    path = _location(frame)[1]
    return path.endswith(".py") or path.startswith("<frozen")


def _is_idle(frames: list[str]) -> bool:
    """A thread waiting (the event loop in epoll, a worker thread on a lock), not working.

    py-spy leaves idle threads out, except where native frames hide the wait from it.
    """
    leaf = _location(frames[-1])[0]
    return leaf in _WAITS or "futex" in leaf


def _short_path(path: str) -> str:
    if "/site-packages/" in path:  # first: a virtualenv may live inside the source tree
        return path.split("/site-packages/", 1)[1]
    if path.startswith(_SOURCE_ROOT):
        return path[len(_SOURCE_ROOT) :]
    if "/lib/python3." in path:
        return path.split("/lib/python3.", 1)[1].split("/", 1)[1]
    return path.rsplit("/", 1)[-1]


def _area(path: str) -> str:
    """The package a file belongs to; ``gateway_kit`` split by its sub-packages."""
    short = _short_path(path)
    parts = short.split("/")
    if parts[0] == "gateway_kit" and len(parts) > 1:
        return f"gateway_kit.{parts[1].removesuffix('.py')}"
    if "/lib/python3." in path and "/site-packages/" not in path:
        return f"stdlib {parts[0].removesuffix('.py')}"
    if path.endswith(".so") or ".so." in path:
        return f"native {parts[0].split('.')[0]}" if len(parts) == 1 else parts[0]
    return parts[0].removesuffix(".py")


def _label(frame: str) -> str:
    name, path = _location(frame)
    return f"{name} ({_short_path(path)})"


@dataclass
class _Tally:
    """Sample counts per area, function and libc leaf, as ``summarize_py_spy`` reports them."""

    busy: int = 0
    idle: int = 0
    areas: Counter[str] = field(default_factory=Counter)
    area_cumulative: Counter[str] = field(default_factory=Counter)
    own: Counter[str] = field(default_factory=Counter)
    cumulative: Counter[str] = field(default_factory=Counter)
    libc: Counter[str] = field(default_factory=Counter)

    def add(self, frames: list[str], count: int) -> None:
        if _is_idle(frames):
            self.idle += count
            return
        self.busy += count
        python = [frame for frame in frames if _is_python(frame)]
        innermost = python[-1] if python else frames[-1]
        in_gc = any(_location(frame)[0].startswith("gc_collect") for frame in frames)
        self.areas["gc" if in_gc else _area(_location(innermost)[1])] += count
        self.own[_label(innermost)] += count
        for area in {_area(_location(frame)[1]) for frame in python} | ({"gc"} if in_gc else set()):
            self.area_cumulative[area] += count
        for label in {_label(frame) for frame in python}:
            self.cumulative[label] += count
        name, where = _location(frames[-1])
        if "libc.so" in where:
            self.libc["(unnamed)" if name.startswith("0x") else name] += count


def summarize_py_spy(path: Path, *, top: int = 25) -> str:
    """Areas, libc leaves, top self time and top cumulative time, as shares of busy samples."""
    tally = _Tally()
    for frames, count in _read_stacks(path):
        tally.add(frames, count)
    total = tally.busy
    if not total:
        return "py-spy recorded no busy sample"
    everywhere = _EVERYWHERE * total
    lines = [f"{total} busy samples ({tally.idle} more waiting in epoll, poll or a lock: left out)"]
    lines += ["", "self time by area (the innermost Python frame's package; gc apart):"]
    lines += _shares(tally.areas, total, top)
    lines += ["", "cumulative time by area (the package is on the stack; >98% left out):"]
    lines += _shares(_below(tally.area_cumulative, everywhere), total, top)
    lines += ["", "in libc at the leaf (system calls: write, read, getpid...; malloc, free):"]
    lines += _shares(tally.libc, total, 10)
    lines += ["", f"top {top} functions by self time (innermost Python frame):"]
    lines += _shares(tally.own, total, top)
    lines += ["", f"top {top} functions by cumulative time (on >98% of samples left out):"]
    lines += _shares(_below(tally.cumulative, everywhere), total, top)
    return "\n".join(lines)


def _below(counter: Counter[str], limit: float) -> Counter[str]:
    return Counter({key: value for key, value in counter.items() if value < limit})


def _shares(counter: Counter[str], total: int, top: int) -> list[str]:
    return [f"  {100 * count / total:5.1f}%  {label}" for label, count in counter.most_common(top)]


def summarize_pstats(path: Path, *, top: int = 25) -> str:
    """cProfile's top functions by self time (tottime) and by cumulative time."""
    out = io.StringIO()
    stats = pstats.Stats(str(path), stream=out)
    stats.strip_dirs()
    for order in ("tottime", "cumulative"):
        out.write(f"\ntop {top} by {order}:\n")
        stats.sort_stats(order).print_stats(top)
    return out.getvalue()


def summarize_strace(path: Path, requests: int, *, top: int = 15) -> str:
    """System calls per request from ``strace -c`` (its times are strace's own: ignored)."""
    calls: Counter[str] = Counter()
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[3].isdigit() and parts[-1] != "total":
            calls[parts[-1]] += int(parts[3])
    per_request = [f"  {count / requests:7.2f}  {name}" for name, count in calls.most_common(top)]
    total = sum(calls.values()) / requests
    return "\n".join([f"system calls per request, all threads: {total:.1f}", *per_request])
