"""PII detection against a labelled corpus: ``python -m gateway_kit.bench pii_corpus``.

``data/pii_corpus.jsonl`` holds realistic prompts (support chats, agent and tool prompts,
pasted e-mails, CRM notes, logs, configuration, JSON; eight languages), each with the values
a privacy officer would want masked, labelled by hand and independently of the detectors:
``{"id", "lang", "text", "expect": [[KIND, value], ...]}``. About a third are near misses
with nothing to mask (order numbers, versions, timestamps, invoice numbers, UUIDs...).

For each kind: precision (of what was masked, how much should have been) and recall (of what
should have been masked, how much was), counted per occurrence of a value. The targets:
recall 100 % on cards, IBANs, e-mail addresses and API keys, precision at least 95 % overall.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from gateway_kit.config.pii import PII_KINDS
from gateway_kit.layers.pii.detectors import BuiltinDetector
from gateway_kit.layers.pii.masking import find_spans

__all__ = ["Score", "evaluate", "load_corpus", "main"]

#: Kinds whose every occurrence in the corpus must be found.
FULL_RECALL = ("CARD", "IBAN", "EMAIL", "API_KEY")
MIN_PRECISION = 0.95


def load_corpus() -> list[dict[str, Any]]:
    text = resources.files("gateway_kit.bench").joinpath("data/pii_corpus.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@dataclass
class Score:
    found: Counter[str] = field(default_factory=Counter)
    right: Counter[str] = field(default_factory=Counter)
    expected: Counter[str] = field(default_factory=Counter)
    #: What went wrong, per prompt: (id, "missed" or "extra", kind, value).
    errors: list[tuple[str, str, str, str]] = field(default_factory=list)

    def precision(self, kind: str | None = None) -> float:
        found = self.found[kind] if kind else sum(self.found.values())
        right = self.right[kind] if kind else sum(self.right.values())
        return right / found if found else 1.0

    def recall(self, kind: str | None = None) -> float:
        expected = self.expected[kind] if kind else sum(self.expected.values())
        right = self.right[kind] if kind else sum(self.right.values())
        return right / expected if expected else 1.0

    @property
    def passed(self) -> bool:
        return self.precision() >= MIN_PRECISION and all(
            self.recall(kind) == 1.0 for kind in FULL_RECALL
        )


def evaluate(corpus: list[dict[str, Any]], *, phone_region: str = "US") -> Score:
    detectors = [BuiltinDetector(phone_region=phone_region)]
    score = Score()
    for prompt in corpus:
        text = prompt["text"]
        found = Counter((s.kind, text[s.start : s.end]) for s in find_spans(text, detectors))
        expected = Counter((kind, value) for kind, value in prompt["expect"])
        for (kind, value), count in found.items():
            score.found[kind] += count
            score.right[kind] += min(count, expected[(kind, value)])
            if count > expected[(kind, value)]:
                score.errors.append((prompt["id"], "extra", kind, value))
        for (kind, value), count in expected.items():
            score.expected[kind] += count
            if count > found[(kind, value)]:
                score.errors.append((prompt["id"], "missed", kind, value))
    return score


def report(score: Score, corpus: list[dict[str, Any]]) -> str:
    near = sum(1 for prompt in corpus if not prompt["expect"])
    languages = Counter(prompt["lang"] for prompt in corpus)
    lines = [
        f"{len(corpus)} prompts ({near} with nothing to mask), languages: "
        + ", ".join(f"{lang} {n}" for lang, n in languages.most_common()),
        f"{'kind':<12}{'expected':>9}{'found':>7}{'right':>7}{'precision':>11}{'recall':>8}",
    ]
    lines += [
        f"{kind:<12}{score.expected[kind]:>9}{score.found[kind]:>7}{score.right[kind]:>7}"
        f"{score.precision(kind):>11.1%}{score.recall(kind):>8.1%}"
        for kind in PII_KINDS
    ]
    lines.append(
        f"{'all':<12}{sum(score.expected.values()):>9}{sum(score.found.values()):>7}"
        f"{sum(score.right.values()):>7}{score.precision():>11.1%}{score.recall():>8.1%}"
    )
    lines += [f"  {pid}: {what} {kind} {value!r}" for pid, what, kind, value in score.errors]
    lines.append(
        f"targets: recall 100 % on {', '.join(FULL_RECALL)}, precision >= "
        f"{MIN_PRECISION:.0%} overall: {'PASS' if score.passed else 'FAIL'}"
    )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m gateway_kit.bench pii_corpus")
    parser.add_argument("--phone-region", default="US")
    args = parser.parse_args(argv)
    corpus = load_corpus()
    score = evaluate(corpus, phone_region=args.phone_region)
    print(report(score, corpus))
    return 0 if score.passed else 1
