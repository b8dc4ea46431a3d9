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
        (
            "[[providers]]\nname = 'x'\nbase_url = 'ftp://x'\n",
            {},
            "providers[0].base_url: must be an http(s)",
        ),
        (
            "[[providers]]\nname = 'x'\ntype = 'mock'\n[[models]]\nname = 'm'\nprovider = 'y'\n",
            {},
            "models[0].provider: no provider named 'y'",
        ),
        ("[server]\nport = -1\n", {}, "server.port: Input should be greater than or equal to 0"),
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
    assert message.startswith(f"{path}: ")
    assert expected in message
    assert "\n" not in message


def test_an_override_error_names_the_variable_instead_of_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, ""), environ={"GATEWAY_KIT_SERVER__PORT": "-1"})
    assert str(info.value) == (
        "GATEWAY_KIT_SERVER__PORT: server.port: Input should be greater than or equal to 0"
    )


def test_several_errors_share_one_line_naming_the_file_once(tmp_path: Path) -> None:
    path = write(tmp_path, "[server]\nport = 'eighty'\nprot = 1\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})
    assert str(info.value) == (
        f"{path}: server.port: Input should be a valid integer, unable to parse string as an "
        "integer; server.prot: no such field (did you mean port?)"
    )


def test_an_error_beside_an_override_names_it_too(tmp_path: Path) -> None:
    path = write(tmp_path, "[webhooks]\nlease_s = 10\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={"GATEWAY_KIT_WEBHOOKS__TIMEOUT_S": "20"})
    assert str(info.value) == (
        f"{path}: webhooks.lease_s: must be longer than timeout_s (10 s <= 20 s) "
        "(with GATEWAY_KIT_WEBHOOKS__TIMEOUT_S)"
    )


def test_a_top_level_field_and_a_whole_table_can_be_overridden(tmp_path: Path) -> None:
    config = load_config(
        write(tmp_path, ""),
        environ={"GATEWAY_KIT_DEFAULT_PLAN": "scale", "GATEWAY_KIT_SERVER": '{"port": 9300}'},
    )
    assert config.default_plan == "scale"
    assert config.server.port == 9300


def test_an_override_of_a_new_plan_makes_a_table_not_a_list(tmp_path: Path) -> None:
    config = load_config(
        write(tmp_path, ""),
        environ={
            "GATEWAY_KIT_PLANS__0__INCLUDED_REQUESTS": "5",
            "GATEWAY_KIT_PLANS__0__BURST_LIMIT_RPM": "1",
            "GATEWAY_KIT_DEFAULT_PLAN": "0",
        },
    )
    assert config.plans["0"].included_requests == 5


def test_list_items_are_set_in_index_order(tmp_path: Path) -> None:
    items = {
        f"GATEWAY_KIT_ROUTING__AUTO__0__MODELS__{i}": "mock-mini" if i % 2 else "mock-large"
        for i in range(11)
    }
    config = load_config(
        write(tmp_path, ""), environ={"GATEWAY_KIT_ROUTING__AUTO__0__NAME": "pick", **items}
    )
    assert len(config.routing.auto[0].models) == 11


def test_a_provider_key_variable_may_carry_the_prefix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # api_key_env names a variable of the operator's choosing, which is not an override.
    monkeypatch.setenv("GATEWAY_KIT_UPSTREAM_KEY", "sk-test")
    path = write(
        tmp_path,
        "[[providers]]\nname = 'x'\napi_key_env = 'GATEWAY_KIT_UPSTREAM_KEY'\n"
        "[[models]]\nname = 'm'\nprovider = 'x'\n",
    )
    config = load_config(path, environ={"GATEWAY_KIT_UPSTREAM_KEY": "sk-test"})
    assert config.providers[0].api_key is not None


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
