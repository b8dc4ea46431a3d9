"""Routing configuration mistakes stop start-up with the file and the field named."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway_kit import ConfigError, load_config

PROVIDERS = """
[[providers]]
name = "mock"
type = "mock"

[[providers]]
name = "claude"
type = "anthropic"
api_key = "sk-ant-test"
"""


@pytest.mark.parametrize(
    ("models", "expected"),
    [
        (
            '[[models]]\nname = "a"\nprovider = "mock"\nfallbacks = ["nope"]\n',
            "models[0].fallbacks: no model named 'nope'",
        ),
        (
            '[[models]]\nname = "a"\nprovider = "mock"\nfallbacks = ["b"]\n'
            '[[models]]\nname = "b"\nprovider = "mock"\nfallbacks = ["c"]\n'
            '[[models]]\nname = "c"\nprovider = "mock"\nfallbacks = ["a"]\n',
            "models[0].fallbacks: a cycle: a -> b -> c -> a",
        ),
        (
            '[[models]]\nname = "a"\n'
            '[[models.deployments]]\nprovider = "mock"\nweight = 0\n'
            '[[models.deployments]]\nprovider = "mock"\nupstream_model = "x"\nweight = 0\n',
            "the weights sum to 0",
        ),
        (
            '[[models]]\nname = "a"\n[[models.deployments]]\nprovider = "ghost"\n',
            "models[0].deployments[0].provider: no provider named 'ghost'",
        ),
        (
            '[[models]]\nname = "a"\nprovider = "mock"\n'
            '[[models.deployments]]\nprovider = "mock"\n',
            "give either provider or deployments",
        ),
        (
            '[[models]]\nname = "a"\nprovider = "mock"\nfallbacks = ["e"]\n'
            '[[models]]\nname = "e"\nprovider = "mock"\nkind = "embedding"\n',
            "'e' is a embedding model",
        ),
        (
            '[[models]]\nname = "a"\nprovider = "mock"\n'
            '[[routing.auto]]\nname = "a"\nmodels = ["a"]\n',
            "routing.auto[0].name: 'a' is also a model's name",
        ),
        (
            '[[models]]\nname = "a"\nprovider = "mock"\n'
            '[[routing.auto]]\nname = "auto"\nmodels = ["a", "zz"]\n',
            "routing.auto[0].models: no model named 'zz'",
        ),
        (
            '[[models]]\nname = "a"\nprovider = "mock"\n'
            '[[routing.auto]]\nname = "auto"\nmodels = ["a"]\n'
            '[routing.auto.complexity]\nmodels = ["a"]\npatterns = ["(unclosed"]\n',
            "is not a valid regular expression",
        ),
        ("[routing]\nretries = -1\n", "routing.retries"),
        ('[[providers]]\nname = "m2"\ntype = "mock"\n[providers.faults]\nstatus = 418\n', "418"),
        (
            '[[providers]]\nname = "o"\n[providers.faults]\nerror_rate = 1\n',
            "only a mock provider injects faults",
        ),
    ],
)
def test_routing_mistakes_name_the_file_and_the_field(
    tmp_path: Path, models: str, expected: str
) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(PROVIDERS + models)
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})
    message = str(info.value)
    assert str(path) in message
    assert expected in message


def test_an_anthropic_provider_defaults_to_anthropics_endpoint(tmp_path: Path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(PROVIDERS + '[[models]]\nname = "sonnet"\nprovider = "claude"\n')
    config = load_config(path, environ={})
    assert config.providers[1].base_url == "https://api.anthropic.com"
    assert config.providers[0].type == "mock"
