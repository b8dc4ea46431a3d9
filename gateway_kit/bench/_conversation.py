"""The ``guardian`` benchmark's requests: a chat application's 2 KB prompt, and a coding agent's
session of 200 messages (about 200 KB), made as they are sent.

The texts are realistic rather than filler, since Guardian's work on a message depends on what
is in it (the volatile parts it normalises, the words that mark a tool error, the characters
the token estimate weighs): a support assistant's instructions and customers' questions; an
agent's instructions and tools, its reasoning and tool calls, and the tools' results, which are
this package's own source files, search hits in them and test runs.

A ``variant`` is another session of the same kind, none of whose messages is in any other
(another checkout path, other files read, other call ids): messages a gateway has never seen.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, overload

from gateway_kit.bench._load import build_request

__all__ = [
    "AGENT_TOOLS",
    "CONVERSATION_MESSAGES",
    "Rotation",
    "agent_session",
    "agent_turn",
    "chat_messages",
    "conversation",
]

Message = dict[str, Any]

#: The agent's conversation as sent: its first messages, then the newest turn (two messages).
CONVERSATION_MESSAGES = 200

_PACKAGE = Path(__file__).resolve().parents[1]

# -- a chat application: a support assistant ---------------------------------------------------

_SUPPORT_SYSTEM = """\
You are the customer support assistant of Northwind Outfitters, an online shop selling outdoor \
clothing, tents, sleeping bags and climbing gear in Europe and North America. Answer in the \
customer's language, in a friendly and concise tone, in at most three short paragraphs.

What you may do: look up the status of an order from its number (NW- followed by seven \
digits), explain delivery times (2-4 working days in the EU, 5-8 to the US and Canada), explain \
the return policy (30 days from delivery, unused items in their original packaging, free \
returns in the EU, a prepaid label for 7.95 USD elsewhere), and help with sizing using the size \
charts of each brand.

What you must not do: promise a refund, a discount or a delivery date; ask for or repeat \
payment card numbers; give medical advice about altitude, cold or injuries; discuss other \
customers' orders. When a request needs a person (a damaged parcel, a refund past 30 days, a \
warranty claim), say so and offer to open a ticket with the support team, who answer within \
one working day.

If the customer is upset, acknowledge it once, then focus on what can be done. Never invent \
an order status: if the order is not found, ask the customer to check the number."""

_PRODUCTS = (
    "Ridgeline 2 tent",
    "Alpine Down 800 jacket",
    "Cascade -7C sleeping bag",
    "Granite 45L backpack",
    "Summit harness (size M)",
    "Trailhead waterproof boots",
)
_ISSUES = (
    "the tracking page has said 'label created' for six days and nothing has moved since",
    "one of the poles arrived bent and the bag has a small tear near the zip",
    "the size I ordered is too small even though I followed the chart, and I need to exchange "
    "it before a trip",
    "I was charged twice on my card statement, although I only got one confirmation e-mail",
    "the parcel was delivered to a neighbour I do not know, according to the carrier",
    "the colour is quite different from the photos on the product page",
)


def chat_messages(index: int) -> list[Message]:
    """A support chat's request: the system prompt, the same every time, and the customer's
    message, new for every ``index`` (its order number, dates and wording)."""
    product = _PRODUCTS[index % len(_PRODUCTS)]
    issue = _ISSUES[index // len(_PRODUCTS) % len(_ISSUES)]
    day = 1 + index % 28
    user = (
        f"Hello, I ordered the {product} on 2026-10-{day:02d} (order NW-{1_000_000 + index}) "
        f"and paid by card. The confirmation e-mail said it would arrive within four working "
        f"days, but {issue}. I am leaving for a two-week trek in the Dolomites on "
        f"2026-12-{day:02d} and I really need the gear before then. Could you tell me what is "
        "going on with this order, whether it can still arrive in time, and what my options "
        "are if it cannot? If I have to send something back, please explain how the return "
        "works from Austria and how long the refund takes once you receive it. I would also "
        "like to know whether I can pick up a replacement in a shop instead. Thank you."
    )
    return [{"role": "system", "content": _SUPPORT_SYSTEM}, {"role": "user", "content": user}]


# -- a coding agent's session ------------------------------------------------------------------

AGENT_TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {
                    field: {"type": kind, "description": about} for field, kind, about in properties
                },
                "required": [properties[0][0]],
            },
        },
    }
    for name, description, properties in (
        (
            "read_file",
            "Read a file of the repository, with line numbers. Long files are cut; ask for a "
            "range of lines to read further.",
            [
                ("path", "string", "the file's path"),
                ("start_line", "integer", "the first line to read (1-based)"),
                ("end_line", "integer", "the last line to read"),
            ],
        ),
        (
            "search",
            "Search the repository's files for a regular expression; answers path:line:text.",
            [
                ("pattern", "string", "a Python regular expression"),
                ("path", "string", "a directory to search in (default: the repository)"),
            ],
        ),
        (
            "run_tests",
            "Run pytest on some test files or node ids and return its output.",
            [("target", "string", "test files, directories or node ids, space-separated")],
        ),
        (
            "edit_file",
            "Replace an exact, unique snippet of a file with new text.",
            [
                ("path", "string", "the file's path"),
                ("old", "string", "the text to replace (must occur once)"),
                ("new", "string", "the replacement"),
            ],
        ),
    )
]

_TESTS = (
    "tests/pipeline/test_body.py",
    "tests/chat/test_request.py",
    "tests/test_fuzz.py",
    "tests/layers/test_limits.py",
    "tests/storage/test_contract.py",
)
_SEARCHES = (
    "max_body_bytes",
    "BodyTooLarge",
    "def read_body",
    "StorageError",
    "Refusal(",
    "content-length",
    "parse_json",
    "ClientDisconnected",
    "more_body",
    "413",
)
_THOUGHTS = (
    "The body is read before the size check runs; let me see where the limit is applied.",
    "That search shows several callers. I will read the one on the chat path first.",
    "The tests pass on this part, so the 500 must come from the streaming branch.",
    "I should check how a chunked body without a content-length is counted.",
    "Let me look at the storage side too, in case the error is raised while settling.",
    "Before editing, I want to see every place that builds this refusal.",
    "This file handles the answer; the limit must be enforced earlier than this.",
)
_FOLLOW_UPS = (
    "Good find. Keep the error format OpenAI-compatible, our SDK users parse it.",
    "Please also make sure a client that disconnects mid-body does not log an error.",
    "Can you check whether the embeddings route has the same problem?",
    "Do not change the public API of read_body, other projects import it.",
    "Run the fuzz tests as well before you finish, they caught this kind of bug before.",
    "Looks right. Add a regression test with a chunked body that lies about its size.",
    "One more thing: the limit should come from the configuration, not a constant.",
)


@functools.cache
def _sources() -> tuple[tuple[str, tuple[str, ...]], ...]:
    """This package's larger modules (the agent's repository), as (relative path, lines)."""
    found = []
    for path in sorted(_PACKAGE.rglob("*.py")):
        relative = path.relative_to(_PACKAGE.parent).as_posix()
        lines = tuple(path.read_text().splitlines())
        if "/bench/" not in relative and len(lines) >= 80:
            found.append((relative, lines))
    return tuple(found)


@functools.cache
def _hits(pattern: str) -> tuple[str, ...]:
    return tuple(
        f"{path}:{number}:{line.strip()}"
        for path, lines in _sources()
        for number, line in enumerate(lines, 1)
        if pattern in line
    )


def _cut(lines: Sequence[str], budget: int) -> str:
    """As many of ``lines`` as fit in about ``budget`` characters."""
    kept: list[str] = []
    size = 0
    for line in lines:
        if kept and size + len(line) > budget:
            break
        kept.append(line)
        size += len(line) + 1
    return "\n".join(kept)


def _call_id(variant: int, step: int) -> str:
    return "call_" + hashlib.sha256(f"{variant}:{step}".encode()).hexdigest()[:24]


def agent_turn(variant: int, step: int) -> list[Message]:
    """One step of the agent: its answer (a thought and a tool call) and the tool's result."""
    root = f"/workspace/s{variant:04d}"
    sources = _sources()
    path, lines = sources[(step * 7 + variant * 13) % len(sources)]
    tool = ("read_file", "search", "read_file", "run_tests", "read_file", "edit_file")[step % 6]
    if tool == "read_file":
        start = 1 + step * 37 % max(1, len(lines) - 60)
        numbered = [f"{n:>6}\t{line}" for n, line in enumerate(lines[start - 1 :], start)]
        body = _cut(numbered, 2_600)
        end = start + body.count("\n")
        arguments: dict[str, Any] = {"path": path, "start_line": start, "end_line": end}
        result = f"{root}/{path} (lines {start}-{end} of {len(lines)}):\n{body}"
    elif tool == "search":
        pattern = _SEARCHES[(step + variant) % len(_SEARCHES)]
        arguments = {"pattern": pattern, "path": "gateway_kit"}
        hits = _hits(pattern)
        result = f"{len(hits)} matches in {root}:\n" + _cut(hits, 1_900)
    elif tool == "run_tests":
        target = _TESTS[step % len(_TESTS)]
        arguments = {"target": target}
        passed = 40 + step * 11 % 160
        result = (
            f"$ cd {root} && .venv/bin/pytest -q {target}\n"
            + "." * min(passed, 72)
            + f" [ {min(99, 100 * min(passed, 72) // (passed + 1))}%]\n"
            + "." * max(0, passed - 72)
            + "F [100%]\n"
            + "=" * 35
            + " FAILURES "
            + "=" * 35
            + f"\n_____ test_oversized_body_is_refused_{step} _____\n\n"
            + "    async def test_oversized_body_is_refused(client):\n"
            + "        body = b'x' * (MAX_BODY + 1)\n"
            + "        response = await client.post('/v1/chat/completions', content=body)\n"
            + ">       assert response.status_code == 413\n"
            + "E       assert 500 == 413\n"
            + "E        +  where 500 = <Response [500 Internal Server Error]>.status_code\n\n"
            + f"{target}:{48 + step % 200}: AssertionError\n"
            + f"FAILED {target}::test_oversized_body_is_refused - assert 500 == 413\n"
            + f"1 failed, {passed} passed in {1 + step % 9}.{step % 97:02d}s"
        )
    else:
        old = lines[(step * 5) % len(lines)].strip() or "pass"
        arguments = {"path": path, "old": old, "new": old + "  # checked before reading"}
        result = f"Edited {root}/{path}: 1 replacement (1 line changed)."
    call = {"name": tool, "arguments": json.dumps(arguments)}
    identity = _call_id(variant, step)
    answer: Message = {
        "role": "assistant",
        "content": _THOUGHTS[step % len(_THOUGHTS)],
        "tool_calls": [{"id": identity, "type": "function", "function": call}],
    }
    return [answer, {"role": "tool", "tool_call_id": identity, "content": result}]


def _agent_system(root: str) -> str:
    return (
        f"You are a coding agent working in the Git checkout at {root}, a Python 3.11 project "
        "(an LLM gateway built of pure-ASGI layers). You have tools to read files, search the "
        "repository, run the tests and edit files; use them rather than guessing, and read a "
        "file before you edit it.\n\n"
        "Work in small steps: state what you want to learn, call one tool, read its result, "
        "and decide the next step. Keep edits minimal and in the project's style: type hints "
        "everywhere, `from __future__ import annotations`, short docstrings, comments that say "
        "why. Never weaken a test to make it pass, never disable a check, never catch "
        "BaseException. Run the relevant tests after every edit and the whole module's tests "
        "before you say you are done.\n\n"
        "When you are done, summarise what you changed, why, and what you tested, in at most "
        "ten lines. If you are blocked, say what you need from the user. Do not push, do not "
        "commit, do not touch files outside the checkout."
    )


def _summary(root: str, step: int) -> Message:
    path = _sources()[step * 3 % len(_sources())][0]
    return {
        "role": "assistant",
        "content": (
            f"Where I am: the limit check in {root}/{path} runs after the body has been read "
            "in full, so a body larger than the limit is buffered before it is refused, and a "
            "chunked body without a content-length skips the early check. The 500 comes from "
            "the error raised while the body is read, which nothing catches on this path. "
            "Next I will move the check into the loop that receives the chunks, refuse as "
            "soon as the running total passes the limit, and answer 413 in the usual error "
            "format. Then I will add a regression test and run the affected test files."
        ),
    }


def agent_session(variant: int = 0, messages: int = CONVERSATION_MESSAGES - 2) -> list[Message]:
    """A coding agent's session of ``messages`` messages: its instructions, the user's task,
    then rounds of seven tool steps, a summary and the user's follow-up (so a user message is
    never more than nine assistant turns back), cut after a whole step."""
    root = f"/workspace/s{variant:04d}"
    session: list[Message] = [
        {"role": "system", "content": _agent_system(root)},
        {
            "role": "user",
            "content": (
                f"In {root}: a chat request whose body is larger than server.max_body_bytes "
                "sometimes gets a 500 instead of a 413, mostly when the client sends it "
                "chunked. Find where the body is read and the limit applied, fix it so every "
                "oversized body is refused with 413 in the OpenAI error format before it is "
                "buffered, and add a regression test. The fuzz tests must keep passing."
            ),
        },
    ]
    step = 0
    while len(session) < messages:
        for _ in range(7):
            session += agent_turn(variant, step)
            step += 1
            if len(session) >= messages:
                return session
        follow_up = _FOLLOW_UPS[step // 7 % len(_FOLLOW_UPS)]
        session += [
            _summary(root, step),
            {"role": "user", "content": f"{follow_up} (working copy: {root}, step {step})"},
        ]
    return session


def conversation(variant: int = 0, step: int = 10_000) -> list[Message]:
    """The agent's whole conversation as one request: its session and a newest step."""
    return [*agent_session(variant), *agent_turn(variant, step)]


# -- requests made as they are sent ------------------------------------------------------------


def _json(value: Any) -> bytes:
    # As the OpenAI SDK sends it (httpx's JSON encoding): compact, UTF-8.
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


class Rotation(Sequence[bytes]):
    """Chat requests made when they are asked for: request ``i`` is ``head`` (the same on every
    request, encoded once) followed by ``tail(i)``, with ``params`` and ``headers``.

    Its length is far beyond what a run sends, so no request repeats; ``run_load`` asks for
    each before its clock starts.
    """

    def __init__(
        self,
        head: Sequence[Message],
        tail: Callable[[int], list[Message]],
        params: dict[str, Any],
        headers: Sequence[tuple[str, str]] = (),
        *,
        path: str = "/v1/chat/completions",
        size: int = 10**9,
    ) -> None:
        self._head = b",".join(_json(message) for message in head)
        self._tail = tail
        self._params = _json(params)
        self._headers = tuple(headers)
        self._path = path
        self._size = size

    def payload(self, index: int) -> dict[str, Any]:
        """Request ``index``'s body, parsed."""
        parsed: dict[str, Any] = json.loads(self.body(index))
        return parsed

    def body(self, index: int) -> bytes:
        tail = b",".join(_json(message) for message in self._tail(index))
        messages = b",".join(part for part in (self._head, tail) if part)
        return b'{"messages":[' + messages + b"]," + self._params[1:]

    def __len__(self) -> int:
        return self._size

    @overload
    def __getitem__(self, index: int) -> bytes: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[bytes]: ...

    def __getitem__(self, index: int | slice) -> bytes | Sequence[bytes]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._size))]
        if not 0 <= index < self._size:
            raise IndexError(index)
        return build_request(self._path, self.body(index), self._headers)
