"""The operator's command line: workspaces, budgets and keys on the configured storage, the
default storage announced, read-only verbs that never create a database, and output that is
safe to print whatever was stored."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from gateway_kit import Gateway, load_config
from gateway_kit.cli import main

pytestmark = pytest.mark.slow


@pytest.fixture
def cfg(tmp_path: Path) -> list[str]:
    path = tmp_path / "gateway.toml"
    path.write_text(
        f'[storage]\nurl = "sqlite:///{tmp_path}/state.db"\n\n'
        "[plans.starter]\nincluded_requests = 100\nburst_limit_rpm = 60\n\n"
        "[plans.scale]\nincluded_requests = 1000\nburst_limit_rpm = 600\n"
    )
    return ["--config", str(path)]


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> object:
    assert main([*args, "--json"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def one_line_error(capsys: pytest.CaptureFixture[str], *args: str, code: int = 2) -> str:
    assert main(list(args)) == code
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    return lines[0]


@pytest.fixture
def workspace(cfg: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    made = run_json(capsys, "workspaces", "create", "--email", "ops@example.com", *cfg)
    assert isinstance(made, dict)
    return str(made["workspace_id"])


def test_show_set_plan_set_email_suspend_and_resume(
    cfg: list[str], workspace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    shown = run_json(capsys, "workspaces", "show", workspace, *cfg)
    assert isinstance(shown, dict)
    assert (shown["plan"], shown["status"]) == ("starter", "active")
    assert shown["usage"]["included_requests"] == 100
    assert shown["keys"] == {"active": 0, "revoked": 0}

    changed = run_json(capsys, "workspaces", "set-plan", workspace, "scale", *cfg)
    assert isinstance(changed, dict)
    assert changed["plan"] == "scale"
    changed = run_json(capsys, "workspaces", "set-email", workspace, "new@example.com", *cfg)
    assert isinstance(changed, dict)
    assert changed["email"] == "new@example.com"
    assert run_json(capsys, "workspaces", "suspend", workspace, *cfg)["status"] == "suspended"  # type: ignore[index]
    listed = run_json(capsys, "workspaces", "list", "--status", "suspended", *cfg)
    assert [w["workspace_id"] for w in listed] == [workspace]  # type: ignore[union-attr,index]
    assert run_json(capsys, "workspaces", "resume", workspace, *cfg)["status"] == "active"  # type: ignore[index]
    assert run_json(capsys, "workspaces", "list", "--plan", "starter", *cfg) == []

    # Human output: one line per field, nested ones on one line.
    assert main(["workspaces", "show", workspace, *cfg]) == 0
    human = capsys.readouterr().out
    assert f"workspace_id  {workspace}\n" in human
    assert "used_requests 0" in human

    error = one_line_error(capsys, "workspaces", "set-plan", workspace, "gold", *cfg, code=2)
    assert "no plan named 'gold'" in error
    error = one_line_error(capsys, "workspaces", "show", "ws_nosuch", *cfg, code=1)
    assert error == "gateway-kit: no workspace ws_nosuch"


def test_delete_needs_yes_and_force_for_money(
    cfg: list[str], workspace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    key = run_json(capsys, "keys", "create", "--workspace", workspace, *cfg)
    error = one_line_error(capsys, "workspaces", "delete", workspace, *cfg)
    assert error.startswith("gateway-kit: --yes: deleting a workspace removes")
    run_json(capsys, "wallet", "topup", "--workspace", workspace, "--amount", "2", *cfg)
    error = one_line_error(capsys, "workspaces", "delete", workspace, "--yes", *cfg, code=2)
    assert "holds $2.00; delete with --force" in error
    deleted = run_json(capsys, "workspaces", "delete", workspace, "--yes", "--force", *cfg)
    assert isinstance(deleted, dict)
    assert (deleted["keys_revoked"], deleted["wallet_discarded_usd"]) == (1, 2.0)
    assert run_json(capsys, "workspaces", "list", *cfg) == []

    async def authenticates() -> object:
        async with Gateway(load_config(cfg[1]), run_worker=False) as gateway:
            return await gateway.keys.authenticate(str(key["key"]))  # type: ignore[index]

    assert anyio.run(authenticates) is None


def test_budget_show_and_set(
    cfg: list[str], workspace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    key = run_json(capsys, "keys", "create", "--workspace", workspace, *cfg)
    assert isinstance(key, dict)
    kid = key["key_id"]
    shown = run_json(capsys, "budget", "show", "--workspace", workspace, *cfg)
    assert isinstance(shown, dict)
    assert shown["cap_usd"] is None
    changed = run_json(
        capsys,
        "budget",
        "set",
        "--workspace",
        workspace,
        "--cap",
        "50",
        "--key-cap",
        f"{kid}=2.5",
        *cfg,
    )
    assert isinstance(changed, dict)
    assert (changed["cap_usd"], changed["key_caps"]) == (50.0, {kid: 2.5})
    changed = run_json(
        capsys,
        "budget",
        "set",
        "--workspace",
        workspace,
        "--cap",
        "default",
        "--key-cap",
        f"{kid}=none",
        *cfg,
    )
    assert isinstance(changed, dict)
    assert (changed["cap_usd"], changed["key_caps"]) == (None, {})

    for args, start in (
        (["--cap", "lots"], "gateway-kit: --cap: not an amount in USD: 'lots'"),
        # Named by the option given, not the API's field (once 'cap_usd').
        (["--cap", "-1"], "gateway-kit: --cap: it must be a number of US dollars from 0"),
        (["--cap", "1e12"], "gateway-kit: --cap: it must be a number of US dollars from 0"),
        (["--key-cap", "oops"], "gateway-kit: --key-cap: expected KEY_ID=USD"),
        (["--key-cap", f"{kid}=-3"], "gateway-kit: --key-cap: it must be a number of US dollars"),
        (
            ["--key-cap", "kid_nosuch=1"],
            "gateway-kit: --key-cap: No key 'kid_nosuch' in this workspace",
        ),
        ([], "gateway-kit: --cap or --key-cap: nothing to change"),
    ):
        error = one_line_error(capsys, "budget", "set", "--workspace", workspace, *args, *cfg)
        assert error.startswith(start), error
    shown = run_json(capsys, "budget", "show", "--workspace", workspace, *cfg)
    assert shown["cap_usd"] is None  # type: ignore[index]


def test_keys_with_roles_and_scopes_and_bounded_grace(
    cfg: list[str], workspace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    plain = run_json(capsys, "keys", "create", "--workspace", workspace, *cfg)
    assert plain["role"] == "inference"  # type: ignore[index]
    admin = run_json(capsys, "keys", "create", "--workspace", workspace, "--role", "admin", *cfg)
    assert admin["role"] == "admin"  # type: ignore[index]
    custom = run_json(
        capsys,
        "keys",
        "create",
        "--workspace",
        workspace,
        "--scopes",
        "inference,budget:read",
        *cfg,
    )
    assert custom["scopes"] == ["inference", "budget:read"]  # type: ignore[index]
    error = one_line_error(
        capsys, "keys", "create", "--workspace", workspace, "--scopes", "inference,root", *cfg
    )
    assert error.startswith("gateway-kit: --scopes: unknown scope 'root'")

    kid = str(plain["key_id"])  # type: ignore[index]
    error = one_line_error(
        capsys, "keys", "rotate", kid, "--workspace", workspace, "--grace-period", "604801", *cfg
    )
    assert error == ("gateway-kit: --grace-period: must be from 0 to 604800 seconds, got 604801")
    listed = run_json(capsys, "keys", "list", "--workspace", workspace, *cfg)
    assert next(k for k in listed if k["key_id"] == kid)["rotated_at"] is None  # type: ignore[union-attr,index]


def test_names_are_printed_escaped_whatever_was_stored(
    cfg: list[str], workspace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    async def store_hostile_names() -> None:
        async with Gateway(load_config(cfg[1]), run_worker=False) as gateway:
            # As an older version (or another tool) could have stored them.
            await gateway.keys.create(workspace, name="\x1b[2J\x1b[31mred")
            await gateway.keys.create(workspace, name="lone \ud800 surrogate")

    anyio.run(store_hostile_names)
    assert main(["keys", "list", "--workspace", workspace, *cfg]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out
    assert "\\x1b[2J\\x1b[31mred" in out
    assert "lone \\ud800 surrogate" in out
    listed = run_json(capsys, "keys", "list", "--workspace", workspace, *cfg)
    assert {k["name"] for k in listed} == {"\x1b[2J\x1b[31mred", "lone \ud800 surrogate"}  # type: ignore[union-attr,index]


def test_read_only_verbs_never_create_a_database(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_KIT_")}

    def cli(*verb: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "gateway_kit.cli", *verb],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    for verb in (
        ["workspaces", "list"],
        ["workspaces", "show", "ws_x"],
        ["keys", "list", "--workspace", "ws_x"],
        ["budget", "show", "--workspace", "ws_x"],
        ["wallet", "show", "--workspace", "ws_x"],
    ):
        done = cli(*verb)
        assert done.returncode == 2, done.stderr
        assert done.stdout == ""
        notice, error = done.stderr.splitlines()
        assert notice == (
            f"gateway-kit: using the default storage, sqlite:///gateway-kit.db in {tmp_path} "
            "(give --config or GATEWAY_KIT_CONFIG for another)"
        )
        assert error.startswith(
            f"gateway-kit: storage.url: no database at {tmp_path}/gateway-kit.db"
        )
        assert f"`{' '.join(verb[:2])}` only reads" in error
        assert not (tmp_path / "gateway-kit.db").exists()
    # A verb that writes makes it, and says where.
    done = cli("workspaces", "create", "--email", "a@b.co")
    assert done.returncode == 0, done.stderr
    assert "using the default storage" in done.stderr
    assert (tmp_path / "gateway-kit.db").exists()
    # With a configuration that names no storage, the notice does not ask for --config.
    (tmp_path / "gateway.toml").write_text('[limits]\nmode = "enforce"\n', encoding="utf-8")
    done = cli("workspaces", "list", "--config", "gateway.toml")
    assert done.returncode == 0, done.stderr
    assert "(the configuration names no [storage])" in done.stderr
