"""The SSE model: framing at any chunk boundary, and field parsing as the WHATWG standard
reads an event stream."""

from __future__ import annotations

import itertools
import json

import pytest

from gateway_kit.sse import EventTooLarge, SSEEvent, SSEParser

# -- framing: the byte stream into events -----------------------------------------------------

STREAM = (
    'data: {"a": "héllo wörld 🚀"}\n\n'
    ": a comment\n\n"
    "event: ping\ndata: line one\ndata: line two\n\n"
    "data: [DONE]\n\n"
).encode()


def frame_in_pieces(stream: bytes, cuts: list[int]) -> list[bytes]:
    """The events' raw bytes (and what is left pending) when ``stream`` arrives cut at
    ``cuts``."""
    parser = SSEParser()
    events: list[bytes] = []
    edges = [0, *cuts, len(stream)]
    for start, end in itertools.pairwise(edges):
        events += [event.encode() for event in parser.feed(stream[start:end])]
    # At most an empty line can be left over (an LF after an event that ended in CR).
    assert parser.pending.strip(b"\r\n") == b""
    return [*events, parser.pending] if parser.pending else events


def sse_data(raw: bytes) -> str | None:
    """The data of the one event ``raw`` holds."""
    [event] = SSEParser().feed(raw) or [None]
    return None if event is None else event.data


def test_framer_yields_each_event_whole_for_every_single_split_point() -> None:
    whole = frame_in_pieces(STREAM, [])
    assert len(whole) == 4
    assert b"".join(whole) == STREAM
    for cut in range(1, len(STREAM)):
        assert frame_in_pieces(STREAM, [cut]) == whole, cut


def test_framer_yields_each_event_whole_for_every_pair_of_split_points() -> None:
    whole = frame_in_pieces(STREAM, [])
    for first, second in itertools.combinations(range(1, len(STREAM)), 2):
        assert frame_in_pieces(STREAM, [first, second]) == whole, (first, second)


class _Counting(SSEParser):
    splits = 0

    def _split(self, buffer: bytes) -> list[bytes]:
        self.splits += 1
        return super()._split(buffer)


@pytest.mark.parametrize("lines", [1, 200], ids=["one line", "many lines"])
def test_a_large_event_in_many_chunks_is_split_once(lines: int) -> None:
    """Joined and split again on every chunk, a 16 MB event took 12 s of CPU. Counted, not
    timed: chunks that cannot end an event are kept, not scanned again."""
    payload = b"".join(b"data: " + b"x" * (200_000 // lines) + b"\n" for _ in range(lines))
    payload += b"\n"
    parser = _Counting()
    events = []
    for at in range(0, len(payload), 1000):
        events += parser.feed(payload[at : at + 1000])
    assert len(events) == 1
    assert parser.splits == 2  # the first chunk, and the one that ends the event: of 201


def test_an_event_past_the_bound_is_an_error_not_a_buffer_without_end() -> None:
    parser = SSEParser(max_event_bytes=10_000)
    parser.feed(b"data: ok\n\n")
    for _ in range(10):
        assert parser.feed(b"y" * 1000) == []  # 10,000 bytes held: at the bound
    with pytest.raises(EventTooLarge, match="more than 10,000 bytes"):
        parser.feed(b"y")


def test_framer_keeps_a_utf8_character_split_between_chunks_whole() -> None:
    rocket = STREAM.index("🚀".encode())
    for offset in range(1, 4):  # inside the four-byte sequence
        events = frame_in_pieces(STREAM, [rocket + offset])
        assert json.loads(sse_data(events[0]) or "") == {"a": "héllo wörld 🚀"}


def test_framer_handles_one_byte_chunks() -> None:
    assert frame_in_pieces(STREAM, list(range(1, len(STREAM)))) == frame_in_pieces(STREAM, [])


@pytest.mark.parametrize("newline", [b"\r\n", b"\r", b"\n"])
def test_framer_accepts_every_line_ending(newline: bytes) -> None:
    stream = STREAM.replace(b"\n", newline)
    expected = [sse_data(e) for e in frame_in_pieces(STREAM, []) if sse_data(e) is not None]
    for cut in [None, *range(1, len(stream))]:
        events = frame_in_pieces(stream, [] if cut is None else [cut])
        # Nothing lost or added, and the same events, wherever the chunk boundary falls.
        assert b"".join(events) == stream
        assert [sse_data(e) for e in events if sse_data(e) is not None] == expected, cut


def test_framer_dispatches_at_a_final_cr_and_ignores_the_lf_that_follows() -> None:
    parser = SSEParser()
    assert [e.raw for e in parser.feed(b"data: x\r\n\r")] == [b"data: x\r\n\r"]
    assert [e.raw for e in parser.feed(b"\ndata: y\r\n\r\n")] == [b"\ndata: y\r\n\r\n"]
    assert sse_data(b"\ndata: y\r\n\r\n") == "y"


def test_framer_reports_a_cut_event_as_pending() -> None:
    parser = SSEParser()
    assert [e.raw for e in parser.feed(b"data: complete\n\ndata: cut of")] == [
        b"data: complete\n\n"
    ]
    assert parser.pending == b"data: cut of"


def test_sse_data_joins_data_lines_and_ignores_comments() -> None:
    assert sse_data(b"event: x\ndata: a\ndata:b\n\n") == "a\nb"
    assert sse_data(b": just a comment\n\n") is None


# -- fields, as the WHATWG standard interprets an event stream ---------------------------------


def parse(stream: bytes) -> list[SSEEvent]:
    return SSEParser().feed(stream)


def test_one_optional_space_after_the_colon_is_dropped() -> None:
    assert [e.data for e in parse(b"data:x\n\ndata: x\n\ndata:  x\n\n")] == ["x", "x", " x"]


def test_data_lines_join_with_lf_and_a_line_without_colon_is_an_empty_field() -> None:
    [event] = parse(b"data: a\ndata\ndata: b\n\n")
    assert event.data == "a\n\nb"


def test_done_with_or_without_the_space() -> None:
    events = parse(b"data: [DONE]\n\ndata:[DONE]\n\ndata:  [DONE]\n\n")
    assert [e.done for e in events] == [True, True, False]


def test_a_blank_line_before_done_is_still_done() -> None:
    events = parse(b'data: {"a":1}\n\n\ndata: [DONE]\n\n')
    assert [e.done for e in events] == [False, True]
    assert b"".join(e.raw or b"" for e in events) == b'data: {"a":1}\n\n\ndata: [DONE]\n\n'


def test_event_id_retry_comments_and_unknown_fields() -> None:
    [event] = parse(b": keep-alive\nevent: delta\nid: 7\nretry: 1500\nfoo: bar\ndata: x\n\n")
    assert event == SSEEvent("x", event="delta", id="7", retry=1500, comments=(" keep-alive",))


def test_an_id_with_nul_and_a_retry_that_is_not_digits_are_ignored() -> None:
    [event] = parse(b"id: a\x00b\nretry: 12ms\nretry: \xd9\xa3\ndata: x\n\n")
    assert (event.id, event.retry) == (None, None)


def test_a_comment_only_event_is_kept_for_forwarding() -> None:
    [event] = parse(b": OPENROUTER PROCESSING\n\n")
    assert event.data is None
    assert event.comments == (" OPENROUTER PROCESSING",)
    assert event.encode() == b": OPENROUTER PROCESSING\n\n"


def test_a_leading_byte_order_mark_is_dropped_even_split_across_chunks() -> None:
    parser = SSEParser()
    assert parser.feed(b"\xef\xbb") == []
    [event] = parser.feed(b"\xbfdata: x\n\n")
    assert event.data == "x"


def test_an_event_cut_by_the_end_of_the_stream_is_not_dispatched() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: whole\n\ndata: cut") == [SSEEvent("whole")]
    assert parser.pending == b"data: cut"


def test_invalid_utf8_is_replaced_not_fatal() -> None:
    [event] = parse(b"data: \xff\n\n")
    assert event.data == "\ufffd"


def test_an_unchanged_event_leaves_byte_for_byte_and_a_changed_one_is_written_anew() -> None:
    raw = b'data:{"choices":[]}\r\nid: 1\r\n\r\n'
    [event] = parse(raw)
    assert event.encode() == raw
    event.set_json({"choices": [], "usage": None})
    assert event.encode() == b'id: 1\ndata: {"choices":[],"usage":null}\n\n'
    assert parse(event.encode()) == [event]


def test_multiline_data_written_anew_round_trips() -> None:
    event = SSEEvent("one\ntwo\r\nthree", event="x")
    assert parse(event.encode()) == [SSEEvent("one\ntwo\nthree", event="x")]


def test_json_is_parsed_once_and_of_json_is_compact() -> None:
    event = SSEEvent.of_json({"a": "é"})
    assert event.encode() == 'data: {"a":"é"}\n\n'.encode()
    assert event.json() is event.json()
    with pytest.raises(ValueError):
        SSEEvent.comment("x").json()
