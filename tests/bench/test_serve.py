from __future__ import annotations

import argparse
from pathlib import Path

from gateway_kit import load_config
from gateway_kit.bench._load import LoadResult
from gateway_kit.bench._provision import (
    Setup,
    provision_many,
    provision_with_cli,
    write_config,
)
from gateway_kit.bench.proxy import Target, TargetResult
from gateway_kit.bench.serve import SERVE, _twin, ratios, setups


def _write(tmp_path: Path, setup: Setup) -> Path:
    storage = "redis://127.0.0.1:6379/15" if setup.redis else f"sqlite:///{tmp_path}/bench.db"
    return write_config(
        tmp_path / "bench.toml",
        setup,
        upstream="http://127.0.0.1:9",
        port=8123,
        storage=storage,
        redis_prefix="gkbench:test:",
    )


def test_the_configuration_is_a_users_with_every_layer_on_and_the_default_transport(
    tmp_path: Path,
) -> None:
    path = _write(tmp_path, Setup("s", redis=True))
    config = load_config(path)
    assert "transport" not in path.read_text()
    assert config.providers[0].transport == "auto"
    assert config.providers[0].base_url == "http://127.0.0.1:9/v1"
    assert (config.auth.mode, config.limits.mode, config.budget.mode) == ("enforce",) * 3
    assert config.guardian.mode == "off"  # measured by `bench guardian`
    assert config.webhooks.worker
    assert config.storage.redis_prefix == "gkbench:test:"
    assert config.server.port == 8123
    plan = config.plans[config.default_plan]
    assert plan.budget_usd is not None
    assert plan.budget_usd >= 10**6
    assert plan.included_requests >= 10**9


def test_a_variant_changes_only_its_own_settings(tmp_path: Path) -> None:
    setup = Setup("v", redis=True, transport="aiohttp", worker=False, log_level="warning")
    config = load_config(_write(tmp_path, setup))
    assert config.providers[0].transport == "aiohttp"
    assert not config.webhooks.worker
    assert config.budget.mode == "enforce"


def _args(**overrides: object) -> argparse.Namespace:
    options: dict[str, object] = {
        "skip_sqlite": False,
        "skip_redis": False,
        "keys": 10_000,
        "variants": False,
    }
    return argparse.Namespace(**(options | overrides))


def test_the_targets_are_both_storages_and_the_rotation() -> None:
    labels = [setup.label for setup in setups(_args())]
    assert labels == [f"{SERVE}, sqlite", f"{SERVE}, redis", f"{SERVE}, redis, 10k keys"]
    assert [s.label for s in setups(_args(skip_redis=True))] == [f"{SERVE}, sqlite"]
    assert len(setups(_args(keys=1, variants=True))) == 6


def _result(name: str, p50_ms: float, rps: float) -> TargetResult:
    one = LoadResult(1, 3, 0, 1.0, (p50_ms / 1000,) * 3)
    many = LoadResult(32, int(rps), 0, 1.0, (0.01,))
    return TargetResult(name, {1: one, 32: many}, 0.0)


def test_the_ratios_judge_the_issues_targets() -> None:
    chosen = setups(_args(skip_sqlite=True))
    results = {
        "forwarder (aiohttp)": _result("forwarder (aiohttp)", 0.4, 4000),
        "gateway-kit, no layers": _result("gateway-kit, no layers", 0.45, 3500),
        f"{SERVE}, redis": _result(f"{SERVE}, redis", 0.9, 1000),
        f"{SERVE}, redis, 10k keys": _result(f"{SERVE}, redis, 10k keys", 1.2, 850),
    }
    redis, rotation = ratios(results, chosen)[1:]
    assert "+0.500 ms p50 over the forwarder" in redis
    assert "(target <= 0.600): PASS" in redis
    assert "0.85x the one-key redis target's (target >= 0.90): FAIL" in rotation


def test_keys_are_provisioned_as_a_user_makes_them(tmp_path: Path) -> None:
    config = _write(tmp_path, Setup("s", redis=False))
    assert provision_with_cli(config)
    keys = provision_many(config, 20, concurrency=4)
    assert len(set(keys)) == 20


def test_a_baseline_from_before_guardian_gets_the_configuration_without_it(
    tmp_path: Path,
) -> None:
    config = _write(tmp_path, Setup("s", redis=False))
    target = Target("s", 8123, ["gateway_kit.cli", "serve", "--config", str(config)])
    before, after = tmp_path / "before", tmp_path / "after"
    (after / "gateway_kit" / "config").mkdir(parents=True)
    (after / "gateway_kit" / "config" / "guardian.py").touch()
    before.mkdir()

    same = _twin(target, str(after))
    assert same.command is not None
    assert str(config) in same.command

    older = _twin(target, str(before))
    assert older.command is not None
    path = Path(older.command[older.command.index("--config") + 1])
    assert path != config
    assert "guardian" not in path.read_text()
    assert path.read_text() == config.read_text().replace('\n\n[guardian]\nmode = "off"', "")
