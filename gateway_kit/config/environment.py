"""``GATEWAY_KIT_*`` variables: the configuration overrides, the others gateway-kit reads, and
what is neither.

An override is ``GATEWAY_KIT_`` and a field's path in capitals, levels joined by ``__``, list
items by index (``GATEWAY_KIT_PROVIDERS__0__BASE_URL``). Every other ``GATEWAY_KIT_*`` name
must be one of ``ENV_VARIABLES``; anything else is refused with what was probably meant, since
a misspelt override (``GATEWAY_KIT_SERVER_PORT``) would otherwise be ignored without a word.
"""

from __future__ import annotations

import difflib
import itertools
import re
import types
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, SecretStr

from gateway_kit.config.gateway import GatewayConfig

__all__ = [
    "ENV_PREFIX",
    "ENV_VARIABLES",
    "Override",
    "container_for",
    "describe_unknown",
    "field_name",
    "field_names",
    "is_text",
    "path_problem",
    "read_environment",
    "typed_path",
]

ENV_PREFIX = "GATEWAY_KIT_"

#: The ``GATEWAY_KIT_*`` variables that are not configuration overrides, and who reads them.
#: Any other ``GATEWAY_KIT_*`` variable must be an override (``load_config`` refuses it).
ENV_VARIABLES: Mapping[str, str] = {
    "GATEWAY_KIT_CONFIG": "the CLI: the configuration file (--config)",
    "GATEWAY_KIT_API_KEY": "gateway-kit status: the workspace's API key (--api-key)",
    "GATEWAY_KIT_BASE_URL": "gateway-kit status: the gateway's URL (--base-url)",
    "GATEWAY_KIT_ADMIN_TOKEN": "gateway-kit status --routes: the operator token (--admin-token)",
    "GATEWAY_KIT_TEST_REDIS_URL": "the test suite: the Redis server of the redis tests",
    "GATEWAY_KIT_BENCH_REDIS_URL": "the benchmarks: the Redis server they measure",
}

_NOT_FOUND = object()


@dataclass(frozen=True, slots=True)
class Override:
    """One ``GATEWAY_KIT_A__B=value`` variable: where it goes and the text it sets."""

    variable: str
    path: tuple[str, ...]
    text: str

    @property
    def field(self) -> str:
        return field_name(typed_path(self.path))


def read_environment(environ: Mapping[str, str]) -> tuple[list[Override], list[str]]:
    """The overrides in ``environ`` (items in index order) and every ``GATEWAY_KIT_*``
    variable that is neither an override nor one of ``ENV_VARIABLES``."""
    overrides: list[Override] = []
    unknown: list[str] = []
    for variable in sorted(environ):
        if not variable.startswith(ENV_PREFIX) or variable in ENV_VARIABLES:
            continue
        path = tuple(variable[len(ENV_PREFIX) :].lower().split("__"))
        if path_problem(path) is None:
            overrides.append(Override(variable, path, environ[variable]))
        else:
            unknown.append(variable)
    overrides.sort(key=lambda o: [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in o.path])
    return overrides, unknown


def describe_unknown(variable: str) -> str:
    """``VARIABLE: field: why it is refused (did you mean ...?)``, one line."""
    path = tuple(variable[len(ENV_PREFIX) :].lower().split("__"))
    problem = path_problem(path) or ""
    guess = _guess(variable, path)
    hint = f" (did you mean {guess}?)" if guess else ""
    return f"{variable}: {problem}{hint}"


def typed_path(path: Sequence[str]) -> tuple[str | int, ...]:
    """``path`` with list indexes as ints (not a plan named ``0``), as pydantic locates."""
    typed: list[str | int] = []
    annotation: Any = GatewayConfig
    for part in path:
        is_index = _shape(annotation) == "list" and part.isdigit()
        typed.append(int(part) if is_index else part)
        annotation = _child(annotation, part)
        if annotation is _NOT_FOUND:
            typed.extend(path[len(typed) :])
            break
    return tuple(typed)


def path_problem(path: Sequence[str]) -> str | None:
    """Why ``path`` names no configuration field (``field: why``), or ``None``."""
    annotation: Any = GatewayConfig
    for depth, part in enumerate(path):
        here = field_name(typed_path(path[:depth]))
        if not part:
            return f"{here or '(top level)'}: an empty level in the name (one '__' too many?)"
        child = _child(annotation, part)
        if child is not _NOT_FOUND:
            annotation = child
            continue
        shape = _shape(annotation)
        if shape == "list":
            return f"{here}: a list, so {part!r} must be an index (0, 1, ...)"
        if shape == "leaf":
            return f"{here}: a value, so nothing goes below it"
        if depth == 0:
            return f"{part}: not a configuration field, nor a variable gateway-kit reads"
        return f"{field_name(typed_path(path[: depth + 1]))}: no such field"
    return None


def field_names(loc: Sequence[str | int]) -> list[str] | None:
    """The field names of the table at ``loc`` (a model's fields), or ``None``."""
    annotation: Any = GatewayConfig
    for part in loc:
        annotation = _child(annotation, str(part))
        if annotation is _NOT_FOUND:
            return None
    model = _unwrap(annotation)
    if isinstance(model, type) and issubclass(model, BaseModel):
        return list(model.model_fields)
    return None


def container_for(path: Sequence[str]) -> list[Any] | dict[str, Any]:
    """An empty list when the field at ``path`` is a list, else an empty table."""
    annotation: Any = GatewayConfig
    for part in path:
        annotation = _child(annotation, part)
        if annotation is _NOT_FOUND:
            return {}
    return [] if _shape(annotation) == "list" else {}


def is_text(path: Sequence[str]) -> bool:
    """Whether the field at ``path`` is a string, which an override sets to its text as is
    (``GATEWAY_KIT_ADMIN__TOKEN=1234...`` stays a string instead of becoming a number)."""
    annotation: Any = GatewayConfig
    for part in path:
        annotation = _child(annotation, part)
        if annotation is _NOT_FOUND:
            return False
    return _unwrap(annotation) in (str, SecretStr)


def field_name(path: Iterable[str | int]) -> str:
    """``("providers", 0, "base_url")`` -> ``providers[0].base_url`` (ints are indexes)."""
    name = ""
    for part in path:
        if isinstance(part, int):
            name += f"[{part}]"
        else:
            name += f".{part}" if name else part
    return name


def _unwrap(annotation: Any) -> Any:
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
        elif origin in (Union, types.UnionType):
            members = [a for a in get_args(annotation) if a is not type(None)]
            if len(members) != 1:
                return annotation
            annotation = members[0]
        else:
            return annotation


def _shape(annotation: Any) -> str:
    annotation = _unwrap(annotation)
    origin = get_origin(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "model"
    if origin in (tuple, list):
        return "list"
    if origin is dict:
        return "dict"
    return "leaf"


def _child(annotation: Any, part: str) -> Any:
    annotation = _unwrap(annotation)
    shape = _shape(annotation)
    if shape == "model":
        field = annotation.model_fields.get(part)
        return _NOT_FOUND if field is None else field.annotation
    if shape == "list" and part.isdigit():
        return get_args(annotation)[0]
    if shape == "dict":
        return get_args(annotation)[1]
    return _NOT_FOUND


def _variable(path: Sequence[str]) -> str:
    return ENV_PREFIX + "__".join(path).upper()


def _guess(variable: str, path: tuple[str, ...]) -> str | None:
    """What ``variable`` probably meant: an override or one of ``ENV_VARIABLES``."""
    # The levels joined by one underscore instead of two (GATEWAY_KIT_SERVER_PORT).
    words = [w for w in re.split(r"_+", variable[len(ENV_PREFIX) :].lower()) if w]
    if 1 < len(words) <= 10:
        for joints in sorted(
            itertools.product(("_", "__"), repeat=len(words) - 1), key=lambda j: j.count("__")
        ):
            text = words[0] + "".join(j + w for j, w in zip(joints, words[1:], strict=True))
            candidate = tuple(text.split("__"))
            if candidate != path and path_problem(candidate) is None:
                return _variable(candidate)
    # One of the variables the CLI, the tests or the benchmarks read (GATEWAY_KIT_API_KEYS).
    rests = {name[len(ENV_PREFIX) :].lower(): name for name in ENV_VARIABLES}
    close = difflib.get_close_matches("_".join(words), rests, n=1, cutoff=0.7)
    if close:
        return rests[close[0]]
    # A misspelt level (GATEWAY_KIT_SERVR__PORT).
    fixed = list(path)
    annotation: Any = GatewayConfig
    for depth, part in enumerate(fixed):
        child = _child(annotation, part)
        if child is _NOT_FOUND:
            names = field_names(fixed[:depth]) or []
            close = difflib.get_close_matches(part, names, n=1, cutoff=0.6)
            if not close:
                return None
            fixed[depth] = close[0]
            child = _child(annotation, close[0])
        annotation = child
    return _variable(fixed) if path_problem(fixed) is None else None
