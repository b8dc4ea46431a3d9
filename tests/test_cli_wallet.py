"""`gateway-kit wallet show|topup|billing` on SQLite, and the budget and wallet in `status`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway_kit import create_app, load_config
from gateway_kit.cli import main
from gateway_kit.testing import run_server

HELLO = {"model": "mock-large", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "gateway.toml"
    path.write_text(
        f'[storage]\nurl = "sqlite:///{tmp_path}/state.db"\n\n'
        "[plans.starter]\nincluded_requests = 100\nburst_limit_rpm = 60\n"
    )
    return path


@pytest.fixture
def cfg(config_file: Path) -> list[str]:
    return ["--config", str(config_file)]


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, object]:
    assert main([*args, "--json"]) == 0, capsys.readouterr().err
    result = json.loads(capsys.readouterr().out)
    assert isinstance(result, dict)
    return result


@pytest.fixture
def workspace(cfg: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    created = run_json(capsys, "workspaces", "create", "--email", "ops@example.com", *cfg)
    return str(created["workspace_id"])


def test_a_new_wallet_is_empty_and_not_billed(
    cfg: list[str], workspace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_json(capsys, "wallet", "show", "--workspace", workspace, *cfg) == {
        "workspace_id": workspace,
        "billing": False,
        "balance_usd": 0.0,
        "last_topup_usd": 0.0,
        "topups": 0,
    }


def test_a_topup_with_an_idempotency_key_credits_once(
    cfg: list[str], workspace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    topup = ["wallet", "topup", "--workspace", workspace, "--amount", "12.5", *cfg]
    keyed = [*topup, "--idempotency-key", "inv-0042", "--reference", "INV-0042"]
    first = run_json(capsys, *keyed)
    assert (first["credited"], first["balance_usd"], first["topups"]) == (True, 12.5, 1)
    again = run_json(capsys, *keyed)
    assert (again["credited"], again["balance_usd"], again["topups"]) == (False, 12.5, 1)
    # Without a key, each run is a top-up of its own.
    assert run_json(capsys, *topup)["balance_usd"] == 25.0
    assert run_json(capsys, *topup)["balance_usd"] == 37.5
    shown = run_json(capsys, "wallet", "show", "--workspace", workspace, *cfg)
    assert (shown["balance_usd"], shown["last_topup_usd"], shown["topups"]) == (37.5, 12.5, 3)


def test_human_output_names_the_balance_and_whether_it_was_credited(
    cfg: list[str], workspace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["wallet", "topup", "--workspace", workspace, "--amount", "3", *cfg]) == 0
    fields = dict(line.split(None, 1) for line in capsys.readouterr().out.splitlines())
    assert fields == {
        "workspace_id": workspace,
        "billing": "False",
        "balance_usd": "3.0",
        "last_topup_usd": "3.0",
        "topups": "1",
        "credited": "True",
    }


@pytest.mark.parametrize("amount", ["0", "-5", "1000000.01", "nan", "inf", "0.0000001"])
def test_a_bad_amount_fails_with_a_clear_message_and_credits_nothing(
    cfg: list[str], workspace: str, capsys: pytest.CaptureFixture[str], amount: str
) -> None:
    code = main(["wallet", "topup", "--workspace", workspace, f"--amount={amount}", *cfg])
    assert code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("gateway-kit: --amount")
    assert "'amount_usd'" not in captured.err
    shown = run_json(capsys, "wallet", "show", "--workspace", workspace, *cfg)
    assert (shown["balance_usd"], shown["topups"]) == (0.0, 0)


def test_an_amount_that_is_not_a_number_is_a_usage_error(
    cfg: list[str], workspace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["wallet", "topup", "--workspace", workspace, "--amount", "ten", *cfg])
    assert exited.value.code == 2
    assert "--amount: invalid float value: 'ten'" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args",
    [
        ["wallet", "show"],
        ["wallet", "topup", "--amount", "5"],
        ["wallet", "billing", "on"],
    ],
)
def test_an_unknown_workspace_is_refused(
    cfg: list[str], workspace: str, capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    # `workspace` made the database: the one asked for is another.
    assert main([*args, "--workspace", "ws_nosuch", *cfg]) == 1
    assert "no workspace ws_nosuch" in capsys.readouterr().err


def test_billing_switches_on_and_off(
    cfg: list[str], workspace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_json(capsys, "wallet", "billing", "on", "--workspace", workspace, *cfg)["billing"]
    assert run_json(capsys, "wallet", "show", "--workspace", workspace, *cfg)["billing"] is True
    off = run_json(capsys, "wallet", "billing", "off", "--workspace", workspace, *cfg)
    assert off["billing"] is False
    assert run_json(capsys, "wallet", "show", "--workspace", workspace, *cfg)["billing"] is False


@pytest.fixture
def served(
    config_file: Path, cfg: list[str], workspace: str, capsys: pytest.CaptureFixture[str]
) -> Iterator[tuple[str, str, str]]:
    """A gateway serving the config's SQLite file, and a key of ``workspace`` made before."""
    made = run_json(capsys, "keys", "create", "--workspace", workspace, "--role", "admin", *cfg)
    key = str(made["key"])
    with run_server(create_app(load_config(config_file))) as base_url:
        yield base_url, workspace, key


@pytest.mark.slow
def test_status_shows_the_budget_and_that_no_wallet_is_billed(
    served: tuple[str, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    base_url, workspace, key = served
    assert main(["status", "--base-url", base_url, "--api-key", key]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"Workspace  {workspace} (ops@example.com)"
    assert lines[-2:] == [
        "Budget     no cap ($0.00 spent this period)",
        "Wallet     not billed from a wallet",
    ]


@pytest.mark.slow
def test_status_with_an_inference_key_says_why_it_shows_no_budget(
    served: tuple[str, str, str], cfg: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    base_url, workspace, _ = served
    made = run_json(capsys, "keys", "create", "--workspace", workspace, *cfg)
    assert made["role"] == "inference"
    assert main(["status", "--base-url", base_url, "--api-key", str(made["key"])]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"Workspace  {workspace} (ops@example.com)"
    assert lines[-1] == "Budget     not shown: this key lacks budget:read (an admin key shows it)"


@pytest.mark.slow
def test_status_shows_the_wallet_balance_once_billed(
    served: tuple[str, str, str], cfg: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    base_url, workspace, key = served
    run_json(capsys, "wallet", "topup", "--workspace", workspace, "--amount", "5", *cfg)
    run_json(capsys, "wallet", "topup", "--workspace", workspace, "--amount", "1234.5", *cfg)
    run_json(capsys, "wallet", "billing", "on", "--workspace", workspace, *cfg)
    assert main(["status", "--base-url", base_url, "--api-key", key]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == "Wallet     $1,239.50 (last top-up $1,234.50)"
    assert "Budget     no cap" in out
    assert key not in out


@pytest.mark.slow
def test_status_json_is_still_exactly_the_me_object(
    served: tuple[str, str, str], cfg: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    base_url, workspace, key = served
    run_json(capsys, "wallet", "topup", "--workspace", workspace, "--amount", "5", *cfg)
    run_json(capsys, "wallet", "billing", "on", "--workspace", workspace, *cfg)
    httpx.post(
        f"{base_url}/v1/chat/completions", json=HELLO, headers={"authorization": f"Bearer {key}"}
    )
    assert main(["status", "--base-url", base_url, "--api-key", key, "--json"]) == 0
    raw = capsys.readouterr().out
    me = httpx.get(f"{base_url}/v1/me", headers={"authorization": f"Bearer {key}"})
    assert raw.strip() == me.text
    assert "wallet" not in json.loads(raw)
    assert "Budget" not in raw


@pytest.mark.parametrize(
    ("command", "says"),
    [
        (["keys", "create", "--name", "a\x1b[31mb"], "--name: must not contain control characters"),
        (["keys", "create", "--name", "n" * 201], "--name: longer than 200 characters"),
        (
            ["wallet", "topup", "--amount", "5", "--reference", "INV\x1b[31m"],
            "--reference: must not contain control characters",
        ),
    ],
)
def test_the_cli_refuses_labels_the_api_refuses(
    cfg: list[str],
    workspace: str,
    capsys: pytest.CaptureFixture[str],
    command: list[str],
    says: str,
) -> None:
    """They were stored: an escape sequence in a key's name reached every terminal listing it."""
    assert main([*command, "--workspace", workspace, *cfg]) == 2
    assert capsys.readouterr().err.startswith(f"gateway-kit: {says}")
    wallet = run_json(capsys, "wallet", "show", "--workspace", workspace, *cfg)
    assert wallet["topups"] == 0
