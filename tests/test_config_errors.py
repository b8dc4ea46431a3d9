"""Every configuration mistake exits 2 with one line naming the file or variable and the field.

Each runs through the real command line (``gateway_kit.cli.main``), and two through the
installed ``gateway-kit`` script, to show that no traceback reaches stderr.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from gateway_kit import Gateway, GatewayConfig, create_http_client, storage_from_url
from gateway_kit.cache.embedders import LocalEmbedder
from gateway_kit.cli import main
from gateway_kit.config import ENV_PREFIX, ENV_VARIABLES, StorageConfig
from gateway_kit.config.environment import path_problem
from gateway_kit.exceptions import ConfigError, MissingExtraError
from gateway_kit.webhooks.ssrf import SSRFGuard

ROOT = Path(__file__).resolve().parent.parent

# A valid configuration the mistakes are added to: one upstream, one model.
BASE = """
[storage]
url = "memory://"

[[providers]]
name = "up"
base_url = "https://api.example.com/v1"
api_key = "sk-test"

[[models]]
name = "m"
provider = "up"
"""


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in list(os.environ):
        if variable.startswith(ENV_PREFIX):
            monkeypatch.delenv(variable)


def run(capsys: pytest.CaptureFixture[str], config: Path, *verb: str) -> tuple[int, str]:
    """Run ``gateway-kit VERB --config CONFIG``; the exit code and stderr's one line."""
    code = main([*(verb or ("workspaces", "list")), "--config", str(config)])
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert captured.out == ""
    return code, lines[0]


def write(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "gateway.toml"
    path.write_text(BASE + extra, encoding="utf-8")
    return path


# -- webhooks.allow -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            "10.0.0.1/8",
            "'10.0.0.1/8' has host bits set: write 10.0.0.0/8 for the network, or 10.0.0.1/32 "
            "for the one address",
        ),
        ("10.0.0.0/33", "'10.0.0.0/33' is not a valid CIDR: '33' is not a valid netmask"),
        ("fd00::/129", "'fd00::/129' is not a valid CIDR: '129' is not a valid netmask"),
        ("10.0.0.256", "'10.0.0.256' is not a valid IP address"),
        (
            "https://hooks.example.com",
            "'https://hooks.example.com': give the host alone, without a scheme",
        ),
        ("hooks.example.com:8443", "'hooks.example.com:8443': give the host alone, without a port"),
        ("hooks.example.com/in", "'hooks.example.com/in': give the host alone, without a path"),
        ("[::1]", "'[::1]': write the address without brackets, ::1"),
        ("*.example.com", "'*.example.com': wildcards are not supported, list each host name"),
        (
            "not a host!",
            "'not a host!' is neither a CIDR nor a host name: ' ' cannot appear in a host name",
        ),
        (
            "-hooks.example.com",
            "'-hooks.example.com' is neither a CIDR nor a host name: the label '-hooks' starts "
            "or ends with '-'",
        ),
        ("hooks..example.com", "'hooks..example.com' is not a valid host name: an empty label"),
        ("", "an empty entry: give a CIDR (10.0.0.0/8) or a host name"),
    ],
)
def test_a_bad_allow_list_entry_names_its_index(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], entry: str, message: str
) -> None:
    config = write(tmp_path, f'[webhooks]\nallow = ["127.0.0.0/8", "{entry}"]\n')
    assert run(capsys, config) == (2, f"gateway-kit: {config}: webhooks.allow[1]: {message}")


def test_allow_list_entries_are_normalized_once_and_trusted_by_the_guard(tmp_path: Path) -> None:
    from gateway_kit import load_config

    allow = '["10.0.0.5", "::1/128", "Hooks.Internal.", "bücher.example", "my_receiver"]'
    config = load_config(write(tmp_path, f"[webhooks]\nallow = {allow}\n"), environ={})
    assert config.webhooks.allow == (
        "10.0.0.5/32",
        "::1/128",
        "hooks.internal",
        "xn--bcher-kva.example",
        "my_receiver",
    )
    SSRFGuard(allow=config.webhooks.allow)  # the same rules: nothing left to refuse


def test_the_guard_built_in_code_applies_the_same_rules() -> None:
    with pytest.raises(ValueError, match=r"^allow\[0\]: '10\.0\.0\.1/8' has host bits set"):
        SSRFGuard(allow=["10.0.0.1/8"])


# -- missing optional extras ----------------------------------------------------------------


@pytest.mark.parametrize("url", ["redis://127.0.0.1:6379/0", "rediss://cache:6380", "unix:///r.s"])
def test_a_redis_url_without_the_redis_extra(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    url: str,
) -> None:
    monkeypatch.setitem(sys.modules, "redis", None)  # import redis now fails
    config = tmp_path / "gateway.toml"
    config.write_text(BASE.replace('"memory://"', f'"{url}"'))
    scheme = url.partition(":")[0]
    assert run(capsys, config) == (
        2,
        f"gateway-kit: {config}: storage.url: {scheme}:// needs the redis extra: "
        "pip install 'gateway-kit[redis]'",
    )


@pytest.mark.parametrize("module", ["httpx_aiohttp", "aiohttp"])
def test_the_aiohttp_transport_without_the_aiohttp_extra(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    module: str,
) -> None:
    monkeypatch.setitem(sys.modules, module, None)
    config = write(tmp_path, '[[providers]]\nname = "fast"\ntransport = "aiohttp"\n')
    assert run(capsys, config) == (
        2,
        f"gateway-kit: {config}: providers[1].transport: 'aiohttp' needs the aiohttp extra: "
        "pip install 'gateway-kit[aiohttp]'",
    )


def test_the_auto_transport_falls_back_without_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gateway_kit import load_config

    monkeypatch.setitem(sys.modules, "httpx_aiohttp", None)
    load_config(write(tmp_path, '[[providers]]\nname = "fast"\ntransport = "auto"\n'), environ={})
    assert isinstance(create_http_client(transport="auto"), httpx.AsyncClient)


def test_the_runtime_imports_raise_the_same_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """For configurations built in code, which never pass through load_config."""
    monkeypatch.setitem(sys.modules, "redis", None)
    monkeypatch.setitem(sys.modules, "httpx_aiohttp", None)
    with pytest.raises(MissingExtraError) as redis_error:
        storage_from_url("redis://127.0.0.1:6379/0")
    assert str(redis_error.value) == (
        "storage.url: redis:// needs the redis extra: pip install 'gateway-kit[redis]'"
    )
    assert isinstance(redis_error.value, ImportError)
    assert redis_error.value.name == "redis"
    with pytest.raises(MissingExtraError) as aiohttp_error:
        create_http_client(transport="aiohttp")
    assert str(aiohttp_error.value) == (
        "transport: 'aiohttp' needs the aiohttp extra: pip install 'gateway-kit[aiohttp]'"
    )


@pytest.mark.anyio
async def test_a_gateway_built_in_code_without_the_redis_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "redis", None)
    config = GatewayConfig(storage=StorageConfig(url="redis://127.0.0.1:6379/0"))
    with pytest.raises(ConfigError, match=r"^storage\.url: redis:// needs the redis extra"):
        async with Gateway(config, run_worker=False):
            pass


# -- GATEWAY_KIT_* variables ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("variable", "message"),
    [
        (
            "GATEWAY_KIT_SERVER_PORT",
            "server_port: not a configuration field, nor a variable gateway-kit reads "
            "(did you mean GATEWAY_KIT_SERVER__PORT?)",
        ),
        (
            "GATEWAY_KIT_SERVR__PORT",
            "servr: not a configuration field, nor a variable gateway-kit reads "
            "(did you mean GATEWAY_KIT_SERVER__PORT?)",
        ),
        (
            "GATEWAY_KIT_SERVER__PROT",
            "server.prot: no such field (did you mean GATEWAY_KIT_SERVER__PORT?)",
        ),
        (
            "GATEWAY_KIT_PROVIDERS_0_BASE_URL",
            "providers_0_base_url: not a configuration field, nor a variable gateway-kit reads "
            "(did you mean GATEWAY_KIT_PROVIDERS__0__BASE_URL?)",
        ),
        (
            "GATEWAY_KIT_API_KEYS",
            "api_keys: not a configuration field, nor a variable gateway-kit reads "
            "(did you mean GATEWAY_KIT_API_KEY?)",
        ),
        (
            "GATEWAY_KIT_CONFIG_FILE",
            "config_file: not a configuration field, nor a variable gateway-kit reads "
            "(did you mean GATEWAY_KIT_CONFIG?)",
        ),
        (
            "GATEWAY_KIT_COLOUR",
            "colour: not a configuration field, nor a variable gateway-kit reads",
        ),
        (
            "GATEWAY_KIT_PROVIDERS__UP__BASE_URL",
            "providers: a list, so 'up' must be an index (0, 1, ...)",
        ),
        ("GATEWAY_KIT_SERVER__PORT__HTTP", "server.port: a value, so nothing goes below it"),
        ("GATEWAY_KIT_SERVER__", "server: an empty level in the name (one '__' too many?)"),
    ],
)
def test_an_unknown_variable_is_refused_with_what_was_meant(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    variable: str,
    message: str,
) -> None:
    monkeypatch.setenv(variable, "9000")
    assert run(capsys, write(tmp_path)) == (2, f"gateway-kit: {variable}: {message}")


def test_several_unknown_variables_share_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GATEWAY_KIT_SERVER_PORT", "9000")
    monkeypatch.setenv("GATEWAY_KIT_SERVER_HOST", "0.0.0.0")
    code, line = run(capsys, write(tmp_path))
    assert code == 2
    assert line.startswith("gateway-kit: GATEWAY_KIT_SERVER_HOST: server_host: ")
    assert "; GATEWAY_KIT_SERVER_PORT: server_port: " in line


def test_the_variables_gateway_kit_reads_are_not_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for variable in ENV_VARIABLES:
        monkeypatch.setenv(variable, "x")
    monkeypatch.setenv("GATEWAY_KIT_SERVER__PORT", "9000")
    assert main(["workspaces", "list", "--config", str(write(tmp_path))]) == 0
    assert capsys.readouterr().err == ""


def test_every_gateway_kit_variable_read_in_the_project_is_known() -> None:
    """The list is the one place: a variable read anywhere must be added to it."""
    read = re.compile(r"""(?:environ\.get\(|environ\[|getenv\()\s*["'](GATEWAY_KIT_\w+)["']""")
    found: set[str] = set()
    for path in [*(ROOT / "gateway_kit").rglob("*.py"), ROOT / "tests" / "conftest.py"]:
        found.update(read.findall(path.read_text(encoding="utf-8")))
    assert {"GATEWAY_KIT_CONFIG", "GATEWAY_KIT_TEST_REDIS_URL"} <= found
    assert found <= set(ENV_VARIABLES), found - set(ENV_VARIABLES)
    for name in ENV_VARIABLES:
        # No reserved name is also an override: one could not be set without the other.
        assert path_problem(name[len(ENV_PREFIX) :].lower().split("__")) is not None, name


# -- values outside their bounds ------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "line"),
    [
        ("[server]\nport = 65536\n", "server.port: Input should be less than or equal to 65535"),
        (
            "[server]\nmax_body_bytes = 10\n",
            "server.max_body_bytes: Input should be greater than or equal to 1024",
        ),
        (
            "[webhooks]\nmax_attempts = 0\n",
            "webhooks.max_attempts: Input should be greater than or equal to 1",
        ),
        ("[routing]\nretries = 11\n", "routing.retries: Input should be less than or equal to 10"),
        (
            "[routing]\ncooldown_s = inf\n",
            "routing.cooldown_s: Input should be less than or equal to 86400",
        ),
        (
            "[routing]\nfail_window_s = inf\n",
            "routing.fail_window_s: Input should be less than or equal to 86400",
        ),
        (
            "[routing]\ncooldown_s = 1e300\n",
            "routing.cooldown_s: Input should be less than or equal to 86400",
        ),
        (
            "[routing]\nfail_window_s = nan\n",
            "routing.fail_window_s: Input should be less than or equal to 86400",
        ),
        (
            "[routing]\nallowed_fails = 10000000000000000000\n",
            "routing.allowed_fails: Input should be less than or equal to 1000000",
        ),
        ("[budget]\nwarn_at = 1.5\n", "budget.warn_at: Input should be less than or equal to 1"),
        # Accepted before, then a traceback (lease), a 500 (weights) or a failed retry.
        (
            "[webhooks]\nlease_s = inf\n",
            "webhooks.lease_s: Input should be less than or equal to 3600",
        ),
        (
            "[webhooks]\nretry_backoff_s = [1, nan, 30, 300]\n",
            "webhooks.retry_backoff_s: delays are seconds from 0 to 604800 (a week)",
        ),
        (
            '[pii]\nphone_region = "UK"\n',
            "pii.phone_region: 'UK' is no region libphonenumber knows (the United Kingdom is GB)",
        ),
        (
            "[auth]\ncache_ttl_s = -1\n",
            "auth.cache_ttl_s: Input should be greater than or equal to 0",
        ),
        (
            "[webhooks]\nlease_s = 2\n",
            "webhooks.lease_s: must be longer than timeout_s (2 s <= 5 s)",
        ),
        (
            "[payments]\nstripe_tolerance_s = 0\n",
            "payments.stripe_tolerance_s: Input should be greater than or equal to 1",
        ),
    ],
)
def test_a_value_outside_its_bounds_in_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: str, line: str
) -> None:
    config = write(tmp_path, extra)
    assert run(capsys, config) == (2, f"gateway-kit: {config}: {line}")


def test_an_unknown_storage_scheme_does_not_repeat_the_url(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(BASE.replace('"memory://"', '"postgres://user:secretpw@db/x"'))
    assert run(capsys, config) == (
        2,
        f"gateway-kit: {config}: storage.url: unknown storage URL scheme 'postgres': use "
        "memory://, sqlite:///<path> or redis://...",
    )


def test_a_value_outside_its_bounds_from_the_environment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GATEWAY_KIT_WEBHOOKS__CONCURRENCY", "5000")
    assert run(capsys, write(tmp_path)) == (
        2,
        "gateway-kit: GATEWAY_KIT_WEBHOOKS__CONCURRENCY: webhooks.concurrency: "
        "Input should be less than or equal to 1000",
    )


# -- overrides that cannot apply ------------------------------------------------------------


@pytest.mark.parametrize(
    ("variable", "value", "line"),
    [
        (
            "GATEWAY_KIT_PROVIDERS__5__NAME",
            "x",
            "providers[5]: no such item: {config} gives 1, so the next one is providers[1]",
        ),
        (
            "GATEWAY_KIT_SERVER",
            "[9000]",
            "server: Input should be a valid dictionary or instance of ServerConfig",
        ),
        (
            "GATEWAY_KIT_PROVIDERS",
            '{"name": "x"}',
            "providers: Input should be a valid tuple",
        ),
    ],
)
def test_an_override_that_cannot_apply(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    variable: str,
    value: str,
    line: str,
) -> None:
    config = write(tmp_path)
    monkeypatch.setenv(variable, value)
    expected = f"gateway-kit: {variable}: {line.format(config=config)}"
    assert run(capsys, config) == (2, expected)


def test_a_string_field_keeps_the_text_of_its_override(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gateway_kit import load_config

    monkeypatch.setenv("GATEWAY_KIT_ADMIN__TOKEN", "123456789012345678901234")
    config = load_config(write(tmp_path))
    assert config.admin.token is not None
    assert config.admin.token.get_secret_value() == "123456789012345678901234"


# -- the file itself ------------------------------------------------------------------------


def test_the_file_is_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, tmp_path) == (
        2,
        f"gateway-kit: {tmp_path}: a directory, not a configuration file",
    )


def test_the_file_is_not_utf8(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "gateway.toml"
    config.write_bytes(b'[server]\nhost = "caf\xe9"\n')
    assert run(capsys, config) == (
        2,
        f"gateway-kit: {config}: not UTF-8 text (byte 0xe9 on line 2); TOML files are UTF-8",
    )


def test_the_file_is_not_toml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text("[server\nport = 1\n")
    assert run(capsys, config) == (
        2,
        f"gateway-kit: {config}: not valid TOML: Expected ']' at the end of a table "
        "declaration (at line 1, column 8)",
    )


def test_the_file_is_missing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "missing.toml"
    assert run(capsys, config) == (2, f"gateway-kit: {config}: no such configuration file")


@pytest.mark.parametrize(
    "verb",
    [
        ("serve",),
        ("worker",),
        ("keys", "list", "--workspace", "ws_1"),
        ("wallet", "show", "--workspace", "ws_1"),
    ],
)
def test_every_command_that_loads_the_configuration_says_the_same(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], verb: tuple[str, ...]
) -> None:
    config = write(tmp_path, "[server]\nport = 65536\n")
    assert run(capsys, config, *verb) == (
        2,
        f"gateway-kit: {config}: server.port: Input should be less than or equal to 65535",
    )


@pytest.mark.parametrize(
    "verb", [("serve", "--port", "0"), ("worker",), ("workspaces", "create", "--email", "a@b.se")]
)
@pytest.mark.parametrize(
    ("url", "says"),
    [
        # Once a traceback from uvicorn's startup, exit 3.
        ("redis://127.0.0.1:99999/0", "storage.url: invalid Redis URL"),
        # Once a gateway that started, said ok on /healthz and answered every request 503.
        ("sqlite:///{tmp}/no/such/dir/state.db", "storage.url: cannot open the SQLite file"),
        ("sqlite:///{tmp}", "storage.url: cannot open the SQLite file"),
    ],
)
def test_a_storage_that_cannot_be_used_stops_the_start_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], verb: tuple[str, ...], url: str, says: str
) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(BASE.replace("memory://", url.format(tmp=tmp_path)), encoding="utf-8")
    code, line = run(capsys, config, *verb)
    assert code == 2
    assert line.startswith(f"gateway-kit: {config}: {says}")


@pytest.mark.parametrize(
    ("headers", "says"),
    [
        ('{ "bad header" = "x" }', "'bad header': not an HTTP header name"),
        ('{ "X-Org" = "x\\nInjected: 1" }', "X-Org: the value must be printable ASCII"),
        ('{ "X-Org" = "ørg" }', "X-Org: the value must be printable ASCII"),
    ],
)
def test_provider_headers_no_request_could_send_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], headers: str, says: str
) -> None:
    """Each was a 500 on every request to the provider's models."""
    config = tmp_path / "gateway.toml"
    config.write_text(
        BASE.replace('api_key = "sk-test"', f'api_key = "sk-test"\nheaders = {headers}'),
        encoding="utf-8",
    )
    code, line = run(capsys, config)
    assert code == 2
    assert line.startswith(f"gateway-kit: {config}: providers[0].headers: {says}")


@pytest.mark.parametrize("port", ["99999", "0", "http"])
def test_a_base_url_with_a_port_no_request_could_use_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], port: str
) -> None:
    """Port 99999 started, and every request to the provider failed."""
    url = f"http://127.0.0.1:{port}/v1"
    config = tmp_path / "gateway.toml"
    config.write_text(BASE.replace("https://api.example.com/v1", url), encoding="utf-8")
    assert run(capsys, config) == (
        2,
        f"gateway-kit: {config}: providers[0].base_url: the port must be from 1 to 65535, "
        f"got {url!r}",
    )


def test_an_embedding_model_on_a_provider_without_embeddings_is_refused_at_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`serve` died in the server's lifespan: a 17-line traceback, exit 3."""
    config = write(
        tmp_path,
        '\n[[providers]]\nname = "claude"\ntype = "anthropic"\napi_key = "x"\n'
        '\n[[models]]\nname = "embed"\nkind = "embedding"\nprovider = "claude"\n',
    )
    assert run(capsys, config, "serve", "--port", "0") == (
        2,
        f"gateway-kit: {config}: models[1].provider: provider 'claude' (anthropic) does not "
        "serve embeddings (an openai-compatible or mock provider does)",
    )


def test_a_flagship_without_a_price_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every saving is measured against it: unpriced, they were all shown as $0."""
    config = write(tmp_path, '[cost]\nflagship_model = "no-such-model-xyz"\n')
    # The file is named, as the loader's errors name it (only `serve` did).
    assert run(capsys, config, "workspaces", "list") == (
        2,
        f"gateway-kit: {config}: cost.flagship_model: no price for 'no-such-model-xyz': name a "
        "model of `models` with a price, or one the price table knows (e.g. gpt-5.1)",
    )


@pytest.mark.parametrize("port", ["70000", "-1"])
def test_a_port_out_of_range_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], port: str
) -> None:
    """uvicorn bound --port 70000 as 4464."""
    assert run(capsys, write(tmp_path), "serve", "--port", port) == (
        2,
        f"gateway-kit: --port: must be from 0 to 65535, got {port}",
    )


# -- the installed script: one line, no traceback -------------------------------------------


def _script() -> list[str]:
    installed = Path(sys.executable).parent / "gateway-kit"
    return [str(installed)] if installed.exists() else [sys.executable, "-m", "gateway_kit.cli"]


@pytest.mark.parametrize(
    ("extra", "environ", "line"),
    [
        (
            '[webhooks]\nallow = ["10.0.0.1/8"]\n',
            {},
            "{config}: webhooks.allow[0]: '10.0.0.1/8' has host bits set: write 10.0.0.0/8 "
            "for the network, or 10.0.0.1/32 for the one address",
        ),
        (
            "",
            {"GATEWAY_KIT_SERVER_PORT": "9000"},
            "GATEWAY_KIT_SERVER_PORT: server_port: not a configuration field, nor a variable "
            "gateway-kit reads (did you mean GATEWAY_KIT_SERVER__PORT?)",
        ),
    ],
)
def test_the_installed_command_prints_one_line_and_no_traceback(
    tmp_path: Path, extra: str, environ: dict[str, str], line: str
) -> None:
    config = write(tmp_path, extra)
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    result = subprocess.run(
        [*_script(), "workspaces", "list", "--config", str(config)],
        capture_output=True,
        text=True,
        env={**env, **environ},
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == f"gateway-kit: {line.format(config=config)}\n"


def test_pii_masking_without_its_extra_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Workspace patterns run under RE2 (time linear in the text): masking needs it."""
    from gateway_kit import load_config

    monkeypatch.setitem(sys.modules, "re2", None)
    path = write(tmp_path, '[pii]\nmode = "enforce"\nkinds = ["EMAIL"]\n')
    with pytest.raises(MissingExtraError) as error:
        load_config(path, environ={})
    assert str(error.value) == (
        f"{path}: pii.mode: PII masking needs the pii extra: pip install 'gateway-kit[pii]'"
    )


def test_the_semantic_cache_without_its_extra_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gateway_kit import load_config

    monkeypatch.setitem(sys.modules, "wordllama", None)
    path = write(tmp_path, '[cache.semantic]\nmodels = ["*"]\n')
    with pytest.raises(MissingExtraError) as error:
        load_config(path, environ={})
    assert str(error.value) == (
        f"{path}: cache.semantic.models: the local embedder needs the semantic extra: "
        "pip install 'gateway-kit[semantic]'"
    )
    with pytest.raises(MissingExtraError, match="semantic extra"):
        LocalEmbedder()


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        (
            '[cache.semantic]\nmodels = ["nope"]\n',
            "cache.semantic.models: no chat model named 'nope'",
        ),
        ('[cache.semantic]\nembedder = "nope"\n', "cache.semantic.embedder: 'local' or an"),
        ("[cache]\nmax_temperature = 3\n", "cache.max_temperature"),
        ('[cache]\nstore = "disk"\n', "cache.store"),
        ('[cache.semantic]\nguard = "loose"\n', "cache.semantic.guard: Input should be 'strict'"),
    ],
)
def test_cache_configuration_mistakes_name_the_field(
    tmp_path: Path, toml: str, message: str
) -> None:
    from gateway_kit import load_config

    with pytest.raises(ConfigError) as error:
        load_config(write(tmp_path, toml), environ={})
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_metrics_without_their_extra_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    config = write(tmp_path, "[metrics]\nenabled = true\n")
    assert run(capsys, config) == (
        2,
        f"gateway-kit: {config}: metrics.enabled: true needs the metrics extra: "
        "pip install 'gateway-kit[metrics]'",
    )


@pytest.mark.parametrize(
    ("extra", "line"),
    [
        ("[request_log]\nmax_records = 5\n", "request_log.max_records"),
        ('[logs]\nformat = "xml"\n', "logs.format"),
        ('[metrics]\naccess = "everyone"\n', "metrics.access"),
        ("[request_log]\nflush_interval_s = 0\n", "request_log.flush_interval_s"),
    ],
)
def test_observability_settings_out_of_bounds_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: str, line: str
) -> None:
    config = write(tmp_path, extra)
    code, message = run(capsys, config)
    assert code == 2
    assert message.startswith(f"gateway-kit: {config}: {line}")
    assert "\n" not in message


def test_a_guardian_threshold_past_any_counter_is_refused_at_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A block_at of 10**19 started, and made every chat request a 500.
    config = write(tmp_path, "\n[guardian.rules.repeat]\nblock_at = 10000000000000000000\n")
    code, line = run(capsys, config)
    assert code == 2
    assert str(config) in line
    assert "guardian.rules.repeat.block_at" in line


def test_a_provider_timeout_without_end_is_refused_at_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(
        BASE.replace('api_key = "sk-test"', 'api_key = "sk-test"\ntimeout_s = inf'),
        encoding="utf-8",
    )
    code, line = run(capsys, config)
    assert code == 2
    assert "providers[0].timeout_s: Input should be less than or equal to 86400" in line


def test_a_deployment_weight_without_end_is_refused_at_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Two weights of 1e308 (or one inf) started, and every chat request was a 500.
    models = (
        '\n[[models]]\nname = "w"\n'
        'deployments = [{provider = "up", weight = 1e308}, {provider = "up", weight = 1e308}]\n'
    )
    code, line = run(capsys, write(tmp_path, models))
    assert code == 2
    assert "models[1].deployments[0].weight: Input should be less than or equal to 1000000" in line


def test_a_price_as_the_price_table_does_not_know_is_refused_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A typo left the model unpriced (every budget passed unreserved), without a word.
    config = write(tmp_path, '\n[[models]]\nname = "typo"\nprovider = "up"\nprice_as = "nope"\n')
    code, line = run(capsys, config)
    assert code == 2
    assert line.startswith(f"gateway-kit: {config}: models[1].price_as:"), line
    assert "the price table has no 'nope'" in line


def test_an_empty_configuration_path_is_named_as_such(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["workspaces", "list", "--config", ""])
    err = capsys.readouterr().err.splitlines()
    assert code == 2
    assert err == [
        "gateway-kit: the configuration path is empty (--config '' or GATEWAY_KIT_CONFIG=): "
        "give a configuration file, or leave it unset for the defaults"
    ]


def test_a_host_that_is_no_address_is_refused_in_the_file_and_on_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # It failed at the bind, exit 1, with a hint about another gateway on the port.
    config = write(tmp_path, '\n[server]\nhost = "999.1.1.1"\n')
    code, line = run(capsys, config)
    assert code == 2
    assert line.endswith("server.host: '999.1.1.1' is neither an IP address nor a host name")
    assert main(["serve", "--host", "no such host!!", "--port", "0"]) == 2
    assert capsys.readouterr().err == (
        "gateway-kit: --host: 'no such host!!' is neither an IP address nor a host name\n"
    )


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["serve", "--port", "abc"], "gateway-kit: serve: argument --port: invalid int value"),
        (["keys", "create"], "gateway-kit: keys create: the following arguments are required"),
    ],
)
def test_a_flag_of_the_wrong_type_is_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], line: str
) -> None:
    # argparse printed its usage first: three or four lines.
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1, err
    assert err[0].startswith(line)
