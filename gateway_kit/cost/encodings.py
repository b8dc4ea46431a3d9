"""OpenAI's tokenizers, offline: tiktoken encodings built from BPE files shipped in the package.

tiktoken downloads an encoding's BPE file from ``openaipublic.blob.core.windows.net`` on first
use; a gateway must not. gateway-kit ships the two files today's OpenAI models use, gzipped in
``gateway_kit/cost/data/``, and builds the ``tiktoken.Encoding`` from them itself:

- ``o200k_base`` (gpt-4o, gpt-4.1, gpt-4.5, gpt-5, o1, o3, o4-mini);
- ``cl100k_base`` (gpt-4, gpt-3.5-turbo, text-embedding-3 and ada-002).

Each file's SHA-256 (of the decompressed bytes) is the one tiktoken itself pins for it, checked
again every time it is loaded. An encoding is loaded once per process, on first use (about a
second: the BPE file is parsed and tiktoken builds its tables), safely from any thread.
``tiktoken`` is the optional ``tokens`` extra: without it nothing here counts, and callers fall
back to estimates.
"""

from __future__ import annotations

import binascii
import gzip
import hashlib
import logging
import threading
from importlib import resources
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import tiktoken

__all__ = ["ENCODINGS", "encoding_for_model", "load_encoding"]

logger = logging.getLogger("gateway_kit.cost")

# The pattern strings and special tokens below are copied from tiktoken 0.14's
# ``tiktoken_ext/openai_public.py`` (its ``o200k_base()`` and ``cl100k_base()`` build them inside
# the functions that download the files, so they cannot be imported); a test checks them
# against that module, so an upgrade of tiktoken that changes them fails it.
_O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
_CL100K_PATTERN = r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""  # noqa: E501


class _Spec:
    __slots__ = ("pattern", "sha256", "special_tokens")

    def __init__(self, sha256: str, pattern: str, special_tokens: dict[str, int]) -> None:
        self.sha256 = sha256
        self.pattern = pattern
        self.special_tokens = special_tokens


_SPECS = {
    "o200k_base": _Spec(
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        _O200K_PATTERN,
        {"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
    ),
    "cl100k_base": _Spec(
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        _CL100K_PATTERN,
        {
            "<|endoftext|>": 100257,
            "<|fim_prefix|>": 100258,
            "<|fim_middle|>": 100259,
            "<|fim_suffix|>": 100260,
            "<|endofprompt|>": 100276,
        },
    ),
}

#: The encodings gateway-kit ships, and the SHA-256 of each BPE file (as tiktoken pins it).
ENCODINGS: dict[str, str] = {name: spec.sha256 for name, spec in _SPECS.items()}


def encoding_for_model(model: str) -> str | None:
    """The shipped encoding of an OpenAI model, or ``None``.

    Follows tiktoken's own tables (``tiktoken.model``: exact names, then prefixes, so dated and
    fine-tuned names such as ``gpt-4o-2024-08-06`` and ``ft:gpt-4o-mini:...`` are known, and
    a newer tiktoken knows newer models). ``None`` for other models, for OpenAI's retired
    encodings (``p50k_base`` and older) and ``gpt-oss`` (whose harmony chat format is not the
    one counted here), and when tiktoken is not installed.
    """
    return _LOADER.encoding_name(model)


def load_encoding(name: str) -> tiktoken.Encoding | None:
    """The encoding ``name`` (one of ``ENCODINGS``), loaded once; ``None`` without tiktoken.

    Raises ``KeyError`` for an encoding not shipped and ``ValueError`` when its file is not the
    one tiktoken pins (a damaged installation); call it at start-up to load before the first
    request needs it.
    """
    return _LOADER.load(name)


class _Loader:
    """Encodings and the model table, loaded once per process whatever the threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._encodings: dict[str, tiktoken.Encoding | None] = {}
        self._errors: dict[str, Exception] = {}
        self._names: dict[str, str | None] = {}

    def encoding_name(self, model: str) -> str | None:
        try:
            return self._names[model]
        except KeyError:
            pass
        try:
            import tiktoken
        except ImportError:
            name = None
        else:
            try:
                name = tiktoken.encoding_name_for_model(model)
            except KeyError:
                name = None
        if name not in _SPECS:
            name = None
        if len(self._names) >= 4096:  # bounded: the names come from requests
            self._names.clear()
        self._names[model] = name
        return name

    def load(self, name: str) -> tiktoken.Encoding | None:
        try:
            return self._encodings[name]
        except KeyError:
            pass
        spec = _SPECS[name]
        with self._lock:
            if name in self._errors:
                # Raised again on every call: reset its traceback, or it grows each time.
                raise self._errors[name].with_traceback(None)
            if name not in self._encodings:
                try:
                    self._encodings[name] = _build(name, spec)
                except Exception as exc:
                    self._errors[name] = exc
                    logger.error("the %s token encoding cannot load: %s", name, exc)
                    raise
            return self._encodings[name]


def _build(name: str, spec: _Spec) -> tiktoken.Encoding | None:
    try:
        import tiktoken
    except ImportError:
        return None
    return tiktoken.Encoding(
        name,
        pat_str=spec.pattern,
        mergeable_ranks=_read_ranks(name, spec.sha256),
        special_tokens=spec.special_tokens,
    )


def _read_ranks(name: str, sha256: str) -> dict[bytes, int]:
    """The BPE ranks of a shipped ``.tiktoken`` file, after checking its hash.

    Read here rather than by ``tiktoken.load.load_tiktoken_bpe``, which goes through tiktoken's
    download cache (copying the file into a temporary directory) and reads no gzip.
    """
    data = gzip.decompress(
        resources.files("gateway_kit.cost").joinpath(f"data/{name}.tiktoken.gz").read_bytes()
    )
    digest = hashlib.sha256(data).hexdigest()
    if digest != sha256:
        raise ValueError(f"{name}.tiktoken.gz: SHA-256 {digest}, expected {sha256}")
    # One "<base64 token> <rank>" per line.
    fields = data.split()
    ranks = dict(zip(map(binascii.a2b_base64, fields[0::2]), map(int, fields[1::2]), strict=True))
    if len(ranks) != len(fields) // 2:
        raise ValueError(f"{name}.tiktoken.gz: a token is listed twice")
    return ranks


_LOADER = _Loader()
