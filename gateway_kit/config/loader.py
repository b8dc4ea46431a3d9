"""Reading the configuration: a TOML file, then ``GATEWAY_KIT_*`` environment overrides.

``load_config(path)`` reads a TOML file, applies overrides such as
``GATEWAY_KIT_SERVER__PORT=9000`` (``__`` separates the levels; list items by index, as in
``GATEWAY_KIT_PROVIDERS__0__BASE_URL``; values are parsed as JSON when they parse, else kept as
strings), validates, and checks that the optional extras the configuration needs are
installed. Every mistake is a ``ConfigError`` of one line, ``<file or variable>: <field>:
<message>``, several joined by ``; ``.
"""

from __future__ import annotations

import difflib
import importlib.util
import json
import os
import re
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from gateway_kit.config.base import Mode
from gateway_kit.config.environment import (
    ENV_PREFIX,
    Override,
    container_for,
    describe_unknown,
    field_name,
    field_names,
    is_text,
    read_environment,
    typed_path,
)
from gateway_kit.config.gateway import GatewayConfig
from gateway_kit.exceptions import ConfigError, MissingExtraError
from gateway_kit.storage._factory import REDIS_SCHEMES

__all__ = ["ENV_PREFIX", "load_config"]

# A validator's message that starts with the field it is about: "base_url: must be ...".
_FIELD_FIRST = re.compile(r"([A-Za-z_]\w*(?:\[\d+\])*(?:\.[A-Za-z_]\w*(?:\[\d+\])*)*): (.+)", re.S)


def load_config(
    path: str | os.PathLike[str] | None = None, *, environ: Mapping[str, str] | None = None
) -> GatewayConfig:
    """Read ``path`` (TOML; ``None`` for the defaults), apply env overrides, validate."""
    environ = os.environ if environ is None else environ
    if path is not None and not str(path).strip():
        # An empty GATEWAY_KIT_CONFIG= (a .env or compose file leaves them) read as ".".
        raise ConfigError(
            "the configuration path is empty (--config '' or GATEWAY_KIT_CONFIG=): give a "
            "configuration file, or leave it unset for the defaults"
        )
    source = str(path) if path is not None else "<defaults>"
    raw = _read(Path(path), source) if path is not None else {}
    overrides, unknown = read_environment(environ)
    origins: dict[str, str] = {}
    for override in overrides:
        _apply(raw, override, source)
        origins[override.field] = override.variable
    # A provider's api_key_env may name a GATEWAY_KIT_* variable of the operator's choosing.
    unknown = [variable for variable in unknown if variable not in _key_variables(raw)]
    if unknown:
        raise ConfigError("; ".join(describe_unknown(variable) for variable in unknown))
    try:
        config = GatewayConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, source, origins)) from None
    _check_extras(config, source, origins)
    return config


def _read(path: Path, source: str) -> dict[str, Any]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{source}: no such configuration file") from None
    except IsADirectoryError:
        raise ConfigError(f"{source}: a directory, not a configuration file") from None
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read the file ({exc.strerror})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError(
            f"{source}: not UTF-8 text (byte 0x{data[exc.start]:02x} on line {line}); "
            "TOML files are UTF-8"
        ) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: not valid TOML: {_one_line(str(exc))}") from None


def _parse_value(override: Override) -> Any:
    if is_text(override.path):
        return override.text
    try:
        return json.loads(override.text)
    except ValueError:
        return override.text


def _apply(raw: dict[str, Any], override: Override, source: str) -> None:
    """Set ``override``'s value in ``raw``, making the tables and items on its way."""
    node: Any = raw
    path = override.path
    for depth, part in enumerate(path):
        last = depth == len(path) - 1
        here = field_name(typed_path(path[:depth]))
        if isinstance(node, list):
            if not part.isdigit():
                raise ConfigError(
                    f"{override.variable}: {here}: {source} gives a list here, not a table"
                )
            index = int(part)
            if index > len(node):
                raise ConfigError(
                    f"{override.variable}: {here}[{index}]: no such item: {source} gives "
                    f"{len(node) or 'none'}, so the next one is {here}[{len(node)}]"
                )
            if index == len(node):
                node.append(None if last else container_for(path[: depth + 1]))
            if last:
                node[index] = _parse_value(override)
            node = node[index]
        elif isinstance(node, dict):
            if last:
                node[part] = _parse_value(override)
            else:
                node = node.setdefault(part, container_for(path[: depth + 1]))
        else:
            raise ConfigError(f"{override.variable}: {here}: a value, not a table, is set here")


def _key_variables(raw: Mapping[str, Any]) -> set[str]:
    providers = raw.get("providers")
    if not isinstance(providers, list):
        return set()
    return {
        str(p["api_key_env"]) for p in providers if isinstance(p, dict) and p.get("api_key_env")
    }


def _describe(exc: ValidationError, source: str, origins: Mapping[str, str]) -> str:
    """One line: ``where: field: message``, the ``where`` given again only when it changes."""
    items: list[str] = []
    previous = ""
    for error in exc.errors():
        field, message = _field_and_message(error)
        where, note = _where(field, source, origins)
        items.append(f"{where + ': ' if where != previous else ''}{field}: {message}{note}")
        previous = where
    return "; ".join(items)


def _field_and_message(error: ErrorDetails) -> tuple[str, str]:
    loc = error["loc"]
    message = _one_line(error["msg"].removeprefix("Value error, "))
    if error["type"] == "extra_forbidden":
        known = field_names(loc[:-1]) or []
        close = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
        message = f"no such field (did you mean {close[0]}?)" if close else "no such field"
    field = field_name(loc)
    found = _FIELD_FIRST.fullmatch(message)
    if found:
        inner, message = found.groups()
        field = f"{field}{'' if inner.startswith('[') else '.'}{inner}" if field else inner
    return field or "(top level)", message


def _where(field: str, source: str, origins: Mapping[str, str]) -> tuple[str, str]:
    """Where ``field`` was set (the variable of an override, else the file), and a note
    naming the overrides beside it when the file alone does not explain the error."""
    for path, variable in origins.items():
        if field == path or field.startswith((f"{path}.", f"{path}[")):
            return variable, ""
    parent = re.sub(r"(\.[^.\[]+|\[\d+\])$", "", field)
    beside = [
        variable
        for path, variable in origins.items()
        if parent != field and path.startswith((f"{parent}.", f"{parent}["))
    ]
    if not beside:
        return source, ""
    if source == "<defaults>":
        return beside[0], ""
    return source, f" (with {', '.join(beside)})"


def _check_extras(config: GatewayConfig, source: str, origins: Mapping[str, str]) -> None:
    """Refuse what needs an optional extra that is not installed, naming the pip install."""
    scheme = config.storage.url.partition(":")[0].lower()
    if scheme in REDIS_SCHEMES and not _installed("redis"):
        where = _where("storage.url", source, origins)[0]
        raise MissingExtraError(
            f"{where}: storage.url", f"{scheme}://", extra="redis", module="redis"
        )
    pii = config.pii
    if pii.mode is not Mode.OFF and not _installed("re2"):
        # Workspace patterns run under RE2 (linear time): no tenant's pattern stalls the rest.
        where = _where("pii.mode", source, origins)[0]
        raise MissingExtraError(f"{where}: pii.mode", "PII masking", extra="pii", module="re2")
    if pii.mode is not Mode.OFF and "PHONE" in pii.kinds and not _installed("phonenumbers"):
        where = _where("pii.kinds", source, origins)[0]
        raise MissingExtraError(f"{where}: pii.kinds", "PHONE", extra="pii", module="phonenumbers")
    semantic = config.cache.semantic
    if semantic.models and semantic.embedder == "local" and not _installed("wordllama"):
        where = _where("cache.semantic.models", source, origins)[0]
        raise MissingExtraError(
            f"{where}: cache.semantic.models",
            "the local embedder",
            extra="semantic",
            module="wordllama",
        )
    if config.metrics.enabled and not _installed("prometheus_client"):
        where = _where("metrics.enabled", source, origins)[0]
        raise MissingExtraError(
            f"{where}: metrics.enabled", "true", extra="metrics", module="prometheus_client"
        )
    if config.tracing.enabled and not _installed("opentelemetry"):
        where = _where("tracing.enabled", source, origins)[0]
        raise MissingExtraError(
            f"{where}: tracing.enabled", "true", extra="otel", module="opentelemetry"
        )
    for index, provider in enumerate(config.providers):
        if provider.transport != "aiohttp":
            continue
        for module in ("httpx_aiohttp", "aiohttp"):
            if not _installed(module):
                field = f"providers[{index}].transport"
                where = _where(field, source, origins)[0]
                raise MissingExtraError(
                    f"{where}: {field}", "'aiohttp'", extra="aiohttp", module=module
                )


def _installed(module: str) -> bool:
    """Whether ``module`` can be imported, without importing it."""
    if module in sys.modules:
        # None: a test (or the user) blocked the import on purpose.
        return sys.modules[module] is not None
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _one_line(text: str) -> str:
    return " ".join(line.strip() for line in text.splitlines() if line.strip())
