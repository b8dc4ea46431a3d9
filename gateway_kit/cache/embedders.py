"""What the semantic cache embeds prompts with: the ``Embedder`` protocol, and ``LocalEmbedder``.

``LocalEmbedder`` runs WordLlama's ``l2_supercat`` model (256 dimensions, static token
embeddings pooled: about 0.1 ms for a short prompt on one core) from the files its wheel
ships (the ``semantic`` extra: ``pip install "gateway-kit[semantic]"``). WordLlama's own
loader looks for its tokenizer in the wrong folder and then downloads it from Hugging Face, so
the files are read here, by path, after their SHA-256 is checked against the digests below:
nothing is ever downloaded, and another model file (a changed wheel) is refused with a message
rather than used silently. ``id`` names the model and its digest: vectors of different
embedders never meet (it is part of the cache's partition).

Another embedder (the provider's ``/v1/embeddings``, say: ``layers.cache.ProviderEmbedder``)
implements ``Embedder``: ``id`` and ``embed``.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from gateway_kit.exceptions import ConfigError, MissingExtraError

__all__ = ["WORDLLAMA_FILES", "Embedder", "LocalEmbedder", "Vector"]

#: A unit vector (``numpy.ndarray`` of float32).
Vector = Any

#: The files of WordLlama's wheel the local embedder reads, and their SHA-256.
WORDLLAMA_FILES = {
    "weights/l2_supercat_256.safetensors": (
        "64b47a2dc493cb8e85944076601189739852d7b64e0e1eedcb1937a251cd9fd5"
    ),
    "tokenizers/l2_supercat_tokenizer_config.json": (
        "93248f2a9ec36c7b35f700a033d5f36228aae48db61aee31007fa49062cdeb68"
    ),
}


class Embedder(Protocol):
    """Turns prompts into unit vectors whose dot product is their cosine similarity."""

    @property
    def id(self) -> str:
        """Names the model (and its version): part of every partition of the cache."""
        ...

    async def embed(self, texts: Sequence[str]) -> list[Vector]: ...


@contextmanager
def _root_logging_kept() -> Iterator[None]:
    """Undo what the code inside does to the root logger: wordllama's modules configure it at
    import (a stderr handler, level INFO), which would make the host application's every
    INFO line print."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        for handler in [h for h in root.handlers if h not in handlers]:
            root.removeHandler(handler)
        root.setLevel(level)


class LocalEmbedder:
    """WordLlama ``l2_supercat`` 256-d, offline, from the files its wheel ships."""

    def __init__(self) -> None:
        try:
            import numpy as np
            from safetensors import safe_open
            from tokenizers import Tokenizer

            with _root_logging_kept():  # wordllama calls logging.basicConfig(level=INFO)
                import wordllama
                from wordllama.inference import WordLlamaInference
        except ImportError as exc:
            raise MissingExtraError(
                "cache.semantic", "the local embedder", extra="semantic", module="wordllama"
            ) from exc
        root = Path(wordllama.__file__).parent
        for name, digest in WORDLLAMA_FILES.items():
            path = root / name
            if not path.is_file():
                raise MissingExtraError(
                    "cache.semantic", f"the model file {name}", extra="semantic", module="wordllama"
                )
            found = hashlib.sha256(path.read_bytes()).hexdigest()
            if found != digest:
                raise ConfigError(
                    f"cache.semantic: the model file {path} has SHA-256 {found[:16]}..., not the "
                    f"{digest[:16]}... gateway-kit was tested with (install wordllama==0.4.0.post1)"
                )
        weights, tokenizer = (root / name for name in WORDLLAMA_FILES)
        with safe_open(str(weights), framework="np", device="cpu") as tensors:
            table = tensors.get_tensor("embedding.weight")
        self._model = WordLlamaInference(table, Tokenizer.from_file(str(tokenizer)))
        self._np = np
        self.id = f"wordllama-l2_supercat-256@{WORDLLAMA_FILES[next(iter(WORDLLAMA_FILES))][:12]}"

    async def embed(self, texts: Sequence[str]) -> list[Vector]:
        # A tenth of a millisecond for a short prompt: run inline, not in a thread.
        return list(self.embed_now(texts))

    def embed_now(self, texts: Sequence[str]) -> Any:
        vectors = self._model.embed(list(texts), norm=True)
        return self._np.asarray(vectors, dtype=self._np.float32)
