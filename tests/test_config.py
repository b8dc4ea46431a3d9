"""Configuration: TOML, environment overrides, and errors naming the file and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway_kit import ConfigError, GatewayConfig, load_config

GOOD = """
[server]
port = 9100

[[providers]]
name = "openai"
base_url = "https://api.openai.com/v1"
api_key_env = "TEST_UPSTREAM_KEY"
transport = "aiohttp"

[[models]]
name = "fast"
provider = "openai"
upstream_model = "gpt-4o-mini"
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gateway.toml"
    path.write_text(text)
    return path


def test_no_file_is_the_offline_demo() -> None:
    config = load_config(None, environ={})
    assert config == GatewayConfig()
    assert config.is_offline
    assert [m.name for m in config.models] == [
        "mock-large",
        "mock-mini",
        "mock-flaky",
        "mock-embed",
    ]
    assert [a.name for a in config.routing.auto] == ["auto"]


def test_a_file_is_loaded_and_the_key_read_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_UPSTREAM_KEY", "sk-from-env")
    config = load_config(write(tmp_path, GOOD), environ={})
    assert config.server.port == 9100
    assert config.providers[0].api_key is not None
    assert config.providers[0].api_key.get_secret_value() == "sk-from-env"
    assert config.models[0].upstream_model == "gpt-4o-mini"
    assert "sk-from-env" not in repr(config)


def test_environment_overrides_nested_fields_and_list_items(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_UPSTREAM_KEY", "k")
    config = load_config(
        write(tmp_path, GOOD),
        environ={
            "GATEWAY_KIT_SERVER__PORT": "9200",
            "GATEWAY_KIT_SERVER__HOST": "0.0.0.0",
            "GATEWAY_KIT_PROVIDERS__0__TIMEOUT_S": "30.5",
            "GATEWAY_KIT_API_KEY": "not-config",  # the CLI's, ignored here
        },
    )
    assert config.server.port == 9200
    assert config.server.host == "0.0.0.0"
    assert config.providers[0].timeout_s == 30.5


@pytest.mark.parametrize(
    ("text", "environ", "expected"),
    [
        ("[server]\nport = 'eighty'\n", {}, "server.port"),
        ("[server]\nport = 99999\n", {}, "server.port"),
        ("[server]\nprot = 1\n", {}, "server.prot"),
        ("[[providers]]\nname = 'x'\nbase_url = 'ftp://x'\n", {}, "base_url must be an http(s)"),
        (
            "[[providers]]\nname = 'x'\ntype = 'mock'\n[[models]]\nname = 'm'\nprovider = 'y'\n",
            {},
            "models[0].provider: no provider named 'y'",
        ),
        ("", {"GATEWAY_KIT_SERVER__PORT": "-1"}, "server.port"),
        (
            "[[providers]]\nname = 'x'\napi_key_env = 'SURELY_NOT_SET_VAR'\n",
            {},
            "SURELY_NOT_SET_VAR is not set",
        ),
        ("[server\nport = 1", {}, "not valid TOML"),
    ],
)
def test_errors_name_the_file_and_the_field(
    tmp_path: Path, text: str, environ: dict[str, str], expected: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path, environ=environ)
    message = str(info.value)
    assert str(path) in message
    assert expected in message


def test_an_override_error_names_the_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="set by GATEWAY_KIT_SERVER__PORT"):
        load_config(write(tmp_path, ""), environ={"GATEWAY_KIT_SERVER__PORT": "x"})


def test_a_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such configuration file"):
        load_config(tmp_path / "missing.toml", environ={})


def test_config_is_frozen() -> None:
    config = GatewayConfig()
    with pytest.raises(ValueError, match="frozen"):
        config.server.port = 1  # type: ignore[misc]


def test_the_sample_configuration_loads_with_a_scale_plan_and_smaller_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    path = Path(__file__).resolve().parent.parent / "examples" / "gateway.toml"
    config = load_config(path, environ={})
    assert config.plans["scale"].included_requests == 1_000_000
    smaller = [p for name, p in config.plans.items() if name != "scale"]
    assert smaller
    assert all(p.included_requests < 1_000_000 for p in smaller)
    assert config.default_plan in config.plans
