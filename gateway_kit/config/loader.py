"""Reading the configuration: a TOML file, then ``GATEWAY_KIT_*`` environment overrides.

``load_config(path)`` reads a TOML file, applies overrides such as
``GATEWAY_KIT_SERVER__PORT=9000`` (``__`` separates the levels; list items by index, as in
``GATEWAY_KIT_PROVIDERS__0__BASE_URL``; values are parsed as JSON when they parse, else kept as
strings) and validates. Errors name the file, the field and, for overrides, the variable.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gateway_kit.config.gateway import GatewayConfig
from gateway_kit.exceptions import ConfigError

__all__ = ["ENV_PREFIX", "load_config"]

ENV_PREFIX = "GATEWAY_KIT_"


def load_config(
    path: str | os.PathLike[str] | None = None, *, environ: Mapping[str, str] | None = None
) -> GatewayConfig:
    """Read ``path`` (TOML; ``None`` for the defaults), apply env overrides, validate."""
    environ = os.environ if environ is None else environ
    source = str(path) if path is not None else "<defaults>"
    raw: dict[str, Any] = {}
    if path is not None:
        try:
            raw = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"{source}: no such configuration file") from None
        except OSError as exc:
            raise ConfigError(f"{source}: cannot read the file ({exc.strerror})") from None
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{source}: not valid TOML: {exc}") from None
    origins = _apply_overrides(raw, environ, source)
    try:
        return GatewayConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, source, origins)) from None


def _apply_overrides(
    raw: dict[str, Any], environ: Mapping[str, str], source: str
) -> dict[str, str]:
    """Apply ``GATEWAY_KIT_A__B=value`` to ``raw``; return {dotted field: variable}."""
    origins: dict[str, str] = {}
    for variable in sorted(environ):
        if not variable.startswith(ENV_PREFIX) or "__" not in variable:
            continue  # e.g. GATEWAY_KIT_API_KEY belongs to the CLI, not the config
        path = variable[len(ENV_PREFIX) :].lower().split("__")
        if not all(path):
            raise ConfigError(f"{variable}: empty part in the variable name")
        _set_path(raw, path, _parse_value(environ[variable]), variable, source)
        origins[".".join(path)] = variable
    return origins


def _parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _set_path(node: Any, path: list[str], value: Any, variable: str, source: str) -> None:
    for depth, part in enumerate(path):
        last = depth == len(path) - 1
        if isinstance(node, list):
            if not part.isdigit() or int(part) > len(node):
                raise ConfigError(
                    f"{variable}: {'.'.join(path[:depth])} in {source} has {len(node)} "
                    f"item(s); {part!r} is not an index"
                )
            index = int(part)
            if index == len(node):
                node.append(value if last else {})
            elif last:
                node[index] = value
            node = node[index]
        elif isinstance(node, dict):
            if last:
                node[part] = value
            else:
                node = node.setdefault(part, [] if path[depth + 1].isdigit() else {})
        else:
            raise ConfigError(f"{variable}: {'.'.join(path[:depth])} is not a table")


def _describe(exc: ValidationError, source: str, origins: Mapping[str, str]) -> str:
    lines = [f"{source}: invalid configuration"]
    for error in exc.errors():
        field = ".".join(str(part) for part in error["loc"]) or "(top level)"
        message = error["msg"].removeprefix("Value error, ")
        origin = origins.get(field)
        suffix = f" (set by {origin})" if origin else ""
        lines.append(f"  {field}: {message}{suffix}")
    return "\n".join(lines)
