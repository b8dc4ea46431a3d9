"""OpenAI's encodings, built offline from the BPE files gateway-kit ships, once per process."""

from __future__ import annotations

import gzip
import hashlib
import logging
import socket
import sys
import threading
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import tiktoken
import tiktoken.load
import tiktoken_ext.openai_public as openai_public

from gateway_kit.cost import encodings
from gateway_kit.cost.encodings import ENCODINGS, encoding_for_model, load_encoding


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> encodings._Loader:
    """A loader that has loaded nothing yet (the process-wide one is left as it was)."""
    loader = encodings._Loader()
    monkeypatch.setattr(encodings, "_LOADER", loader)
    return loader


def tiktoken_definition(name: str, monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, Any], str]:
    """tiktoken's own definition of an encoding and the hash it pins, without downloading."""
    pinned: list[str] = []

    def no_download(path: str, expected_hash: str | None = None) -> dict[bytes, int]:
        assert expected_hash is not None
        pinned.append(expected_hash)
        return {}

    monkeypatch.setattr(openai_public, "load_tiktoken_bpe", no_download)
    definition: dict[str, Any] = openai_public.ENCODING_CONSTRUCTORS[name]()
    return definition, pinned[0]


@pytest.mark.parametrize("name", ["o200k_base", "cl100k_base"])
def test_each_shipped_file_is_the_one_tiktoken_pins(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, pinned = tiktoken_definition(name, monkeypatch)
    shipped = resources.files("gateway_kit.cost").joinpath(f"data/{name}.tiktoken.gz")
    assert hashlib.sha256(gzip.decompress(shipped.read_bytes())).hexdigest() == pinned
    assert ENCODINGS[name] == pinned


@pytest.mark.parametrize("name", ["o200k_base", "cl100k_base"])
def test_patterns_and_special_tokens_are_tiktokens(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    definition, _ = tiktoken_definition(name, monkeypatch)
    encoding = load_encoding(name)
    assert encoding is not None
    assert encoding.name == definition["name"]
    assert encoding._pat_str == definition["pat_str"]
    assert encoding._special_tokens == definition["special_tokens"]


@pytest.mark.parametrize(
    ("name", "text", "tokens"),
    [
        ("o200k_base", "hello world", [24912, 2375]),
        ("cl100k_base", "hello world", [15339, 1917]),
        ("o200k_base", "人工智能是计算机科学的一个分支。", None),
    ],
)
def test_encodings_give_openais_token_ids(name: str, text: str, tokens: list[int] | None) -> None:
    encoding = load_encoding(name)
    assert encoding is not None
    ids = encoding.encode_ordinary(text)
    if tokens is not None:
        assert ids == tokens
    assert encoding.decode(ids) == text
    assert encoding.n_vocab == {"o200k_base": 200019, "cl100k_base": 100277}[name]


@pytest.mark.parametrize(
    ("model", "encoding"),
    [
        ("gpt-4o", "o200k_base"),
        ("gpt-4o-mini", "o200k_base"),
        ("gpt-4o-2024-08-06", "o200k_base"),
        ("chatgpt-4o-latest", "o200k_base"),
        ("gpt-4.1-nano", "o200k_base"),
        ("gpt-5", "o200k_base"),
        ("gpt-5.1", "o200k_base"),
        ("gpt-5-mini", "o200k_base"),
        ("o1", "o200k_base"),
        ("o3-mini", "o200k_base"),
        ("o4-mini", "o200k_base"),
        ("ft:gpt-4o-mini-2024-07-18:acme::abc123", "o200k_base"),
        ("gpt-4", "cl100k_base"),
        ("gpt-4-turbo", "cl100k_base"),
        ("gpt-3.5-turbo", "cl100k_base"),
        ("gpt-35-turbo", "cl100k_base"),
        ("text-embedding-3-small", "cl100k_base"),
        # Not shipped: retired encodings, and gpt-oss's harmony format.
        ("davinci", None),
        ("text-davinci-003", None),
        ("gpt-oss-120b", None),
        # Not OpenAI's.
        ("claude-sonnet-4-5", None),
        ("llama-3.1-70b", None),
        ("mock-large", None),
        ("", None),
    ],
)
def test_models_map_to_encodings_as_tiktoken_maps_them(model: str, encoding: str | None) -> None:
    assert encoding_for_model(model) == encoding


def test_without_tiktoken_there_is_no_encoding(
    fresh: encodings._Loader, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "tiktoken", None)
    assert encoding_for_model("gpt-4o") is None
    assert load_encoding("o200k_base") is None


def test_loading_never_touches_the_network(
    fresh: encodings._Loader, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"network or tiktoken's download cache used: {args}")

    # tiktoken's cache, empty: if anything reached for it, it would have to download.
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(tiktoken.load, "read_file", refuse)
    monkeypatch.setattr(tiktoken.load, "read_file_cached", refuse)
    for name in ENCODINGS:
        encoding = load_encoding(name)
        assert encoding is not None
        assert len(encoding.encode_ordinary("hello world")) == 2
    assert list(tmp_path.iterdir()) == []


def test_an_encoding_loads_once_whatever_the_threads(
    fresh: encodings._Loader, monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[str] = []
    build = encodings._build

    def counting_build(name: str, spec: Any) -> tiktoken.Encoding | None:
        built.append(name)
        return build(name, spec)

    monkeypatch.setattr(encodings, "_build", counting_build)
    start = threading.Barrier(8)
    loaded: list[tiktoken.Encoding | None] = []

    def load() -> None:
        start.wait()
        loaded.append(load_encoding("cl100k_base"))

    threads = [threading.Thread(target=load) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert built == ["cl100k_base"]
    assert len(loaded) == 8
    assert all(encoding is loaded[0] is not None for encoding in loaded)


def test_a_damaged_file_is_refused_every_time_and_logged_once(
    fresh: encodings._Loader, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    spec = encodings._SPECS["cl100k_base"]
    monkeypatch.setattr(spec, "sha256", "0" * 64)
    with caplog.at_level(logging.ERROR, logger="gateway_kit.cost"):
        for _ in range(3):
            with pytest.raises(ValueError, match="SHA-256") as raised:
                load_encoding("cl100k_base")
    assert len(caplog.records) == 1
    # Raised again and again, the same error does not pile up tracebacks.
    depth = 0
    traceback = raised.value.__traceback__
    while traceback is not None:
        depth += 1
        traceback = traceback.tb_next
    assert depth <= 3


def test_only_shipped_encodings_load() -> None:
    with pytest.raises(KeyError):
        load_encoding("p50k_base")
