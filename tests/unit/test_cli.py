"""The command line's pure parts: parsing, saga locators, URI and password resolution, rendering."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections import namedtuple

import orjson
import pytest

from safebunny.cli import exits
from safebunny.cli.access import resolve_uri
from safebunny.cli.exits import CliError
from safebunny.cli.locate import load_saga, split_locator
from safebunny.cli.main import build_parser, main
from safebunny.cli.render import cell, key_values, table, to_json, to_rows
from safebunny.ids import correlation_id_for
from safebunny.saga.look.trace import candidates


# ------------------------------------------------------------------------------------------ parsing
@pytest.mark.parametrize("argv, expected", [
    (["status", "shop.sagas:fulfilment"], {"saga": "shop.sagas:fulfilment", "watch": None, "uri": None}),
    (["status", "s.py", "--watch"], {"watch": 2.0}),
    (["status", "s.py", "--watch", "0.5", "--json"], {"watch": 0.5, "json": True}),
    (["--uri", "amqp://h/", "status", "s.py"], {"uri": "amqp://h/"}),
    (["status", "s.py", "--uri", "amqp://h/"], {"uri": "amqp://h/"}),
    (["topology", "declare", "m:s"], {"action": "declare", "saga": "m:s"}),
    (["topology", "show", "m:s", "--json"], {"action": "show", "json": True}),
    (["poison", "list", "m:s", "--step", "payment"], {"action": "list", "step": "payment"}),
    (["poison", "show", "m:s", "--id", "a", "--id", "b"], {"action": "show", "id": ["a", "b"]}),
    (["poison", "redrive", "m:s", "--all", "--step", "stock.OrderPlaced"], {"all": True, "id": []}),
    (["poison", "redrive", "m:s", "--id", "x"], {"all": False, "id": ["x"], "force": False}),
    (["poison", "redrive", "m:s", "--all", "--force"], {"all": True, "force": True}),
    (["trace", "m:s", "order-7"], {"key": "order-7", "saga": "m:s"}),
    (["message-id", "c", "billing", "Invoice", "2"], {"index": 2, "needs_saga": False}),
    (["run", "m:s", "--once"], {"once": True, "continuous": False, "timeout": 600.0, "restarts": 2, "remote": None}),
    (["run", "m:s", "--continuous", "--remote", "sc://h:15002", "--metrics-port", "9108"],
     {"continuous": True, "remote": "sc://h:15002", "metrics_port": 9108, "metrics_host": "127.0.0.1"}),
])
def test_parser_accepts(argv: list[str], expected: dict) -> None:
    args = vars(build_parser().parse_args(argv))
    for key, value in expected.items():
        assert args[key] == value, (argv, key, args)


@pytest.mark.parametrize("argv", [
    ["status"],                                         # no saga
    ["status", "s.py", "--watch", "0"],                 # watch must be > 0
    ["status", "s.py", "--watch", "soon"],
    ["poison", "redrive", "m:s", "--id", "x", "--all"],  # one or the other
    ["poison", "show", "m:s"],                          # show needs --id
    ["topology", "drop", "m:s"],
    ["bogus"],
    ["run", "m:s"],                                      # --once or --continuous
    ["run", "m:s", "--once", "--continuous"],
    ["run", "m:s", "--once", "--remote", "sc://h", "--master", "local[2]"],
    ["run", "m:s", "--once", "--timeout", "0"],
])
def test_parser_refuses_with_usage_code(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(argv)
    assert info.value.code == exits.USAGE
    assert "usage:" in capsys.readouterr().err


def test_id_commands_stay(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["correlation-id", "order-1"]) == 0
    assert capsys.readouterr().out.strip() == correlation_id_for("order-1")
    assert main(["message-id", "cause", "billing", "InvoiceRequested"]) == 0
    assert len(capsys.readouterr().out.strip()) == 36


# ------------------------------------------------------------------------------------------ locators
@pytest.mark.parametrize("locator, expected", [
    ("shop.sagas:fulfilment", ("shop.sagas", "fulfilment", False)),
    ("shop.sagas", ("shop.sagas", None, False)),
    ("sagas/fulfil.py", ("sagas/fulfil.py", None, True)),
    ("fulfil.py:saga", ("fulfil.py", "saga", True)),
    ("/abs/dir/fulfil.py:build", ("/abs/dir/fulfil.py", "build", True)),
])
def test_split_locator(locator: str, expected: tuple) -> None:
    assert split_locator(locator) == expected


@pytest.mark.parametrize("locator", ["", "not a module", "shop-sagas:x"])
def test_split_locator_refuses(locator: str) -> None:
    with pytest.raises(CliError) as info:
        split_locator(locator)
    assert info.value.code == exits.SAGA


def test_load_saga_errors_say_what_to_do(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    plain = tmp_path / "plain.py"
    plain.write_text("answer = 42\n")
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('no config')\n")
    monkeypatch.chdir(tmp_path)
    cases = {
        str(tmp_path / "missing.py"): "does not exist",
        str(plain): "defines no safebunny.Saga",
        f"{plain}:nope": "has no attribute 'nope'",
        f"{plain}:answer": "is a int, not a safebunny.Saga",
        str(broken): "importing",
        "no_such_module_here:saga": "module 'no_such_module_here' not found",
    }
    for locator, words in cases.items():
        with pytest.raises(CliError) as info:
            load_saga(locator)
        assert words in str(info.value), (locator, str(info.value))
        assert info.value.code == exits.SAGA


def test_main_maps_a_bad_locator_to_exit_3(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "no_such_module_here"]) == exits.SAGA
    err = capsys.readouterr().err
    assert err.startswith("safebunny: error: module 'no_such_module_here' not found")


# ------------------------------------------------------------------------------------------ URI and password
def test_uri_order_cli_then_env_then_saga() -> None:
    env = {"SAFEBUNNY_URI": "amqp://g:g@env-host/%2F"}
    assert resolve_uri("amqp://g:g@cli-host/", env, "amqp://g:g@saga/") == "amqp://g:g@cli-host/"
    assert resolve_uri(None, env, "amqp://g:g@saga/") == "amqp://g:g@env-host/%2F"
    assert resolve_uri(None, {}, "amqp://g:g@saga/") == "amqp://g:g@saga/"


def test_password_from_env_replaces_the_uris() -> None:
    uri = resolve_uri("amqp://app@host:5672/%2F", {"SAFEBUNNY_PASSWORD": "p@ss:word"}, None)
    assert uri == "amqp://app:p%40ss%3Aword@host:5672/%2F"


def test_password_prompt_only_when_a_user_has_none() -> None:
    asked: list[str] = []

    def prompt(text: str) -> str:
        asked.append(text)
        return "s3cret"

    assert resolve_uri("amqp://app@host/", {}, None, prompt, interactive=True) == "amqp://app:s3cret@host/"
    assert asked == ["password for app@host: "]
    assert resolve_uri("amqp://app:given@host/", {}, None, prompt, interactive=True) == "amqp://app:given@host/"
    assert resolve_uri("amqp://host/", {}, None, prompt, interactive=True) == "amqp://host/"
    assert len(asked) == 1


def test_no_terminal_no_password_says_set_the_variable() -> None:
    with pytest.raises(CliError) as info:
        resolve_uri("amqp://app@host/", {}, None, interactive=False)
    assert "SAFEBUNNY_PASSWORD" in str(info.value) and info.value.code == exits.USAGE


def test_bad_uri_is_a_usage_error_without_the_password() -> None:
    with pytest.raises(CliError) as info:
        resolve_uri("http://u:topsecret@host/", {}, None)
    assert "topsecret" not in str(info.value) and "--uri" in str(info.value)
    with pytest.raises(CliError) as info:
        resolve_uri(None, {}, None)
    assert "SAFEBUNNY_URI" in str(info.value)


def test_a_bad_uri_query_parameter_is_one_line_and_the_usage_code(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    saga = tmp_path / "shop_saga.py"
    saga.write_text("import safebunny\n"
                    f"saga = safebunny.Saga('shop', uri='amqp://guest:guest@127.0.0.1/%2F', root={str(tmp_path)!r})\n")
    code = main(["status", f"{saga}:saga", "--uri", "amqp://app:topsecret@127.0.0.1:5672/%2F?heartbeat=abc"])
    err = capsys.readouterr().err
    assert code == exits.USAGE
    assert err.count("\n") == 1 and "invalid query parameter" in err and "heartbeat" in err
    assert "topsecret" not in err and "Traceback" not in err


def test_the_cli_uses_the_sagas_own_password_without_a_prompt(tmp_path) -> None:
    saga = tmp_path / "own_saga.py"
    saga.write_text("import safebunny\n"
                    f"saga = safebunny.Saga('shop', uri='amqp://app:s3cret@127.0.0.1/%2F', root={str(tmp_path)!r})\n")
    from safebunny.cli.access import open_saga

    loaded = open_saga(f"{saga}:saga", None, {})  # no terminal here: a prompt would raise
    assert loaded.connection_uri == "amqp://app:s3cret@127.0.0.1/%2F" and "s3cret" not in loaded.uri


def test_redrive_refused_after_compensation_is_one_line_and_force_passes_through(tmp_path, capsys) -> None:
    saga = tmp_path / "stub_saga.py"
    saga.write_text(
        "import safebunny\n"
        "from safebunny.errors import SafeBunnyOptionError\n"
        "class Stub(safebunny.Saga):\n"
        "    def redrive(self, node, type, ids=None, force=False, error_type=None):\n"
        "        if not force:\n"
        "            raise SafeBunnyOptionError('Refusing to redrive 1 message(s) of stock', 'force')\n"
        "        return 1\n"
        f"saga = Stub('shop', uri='amqp://guest:guest@127.0.0.1/%2F', root={str(tmp_path)!r})\n"
        "saga.step('stock', consumes='OrderPlaced', from_node='orders', schema='id string')(lambda df, ctx: None)\n")
    assert main(["poison", "redrive", f"{saga}:saga", "--all"]) == exits.USAGE
    assert capsys.readouterr().err.startswith("safebunny: error: Refusing to redrive")
    assert main(["poison", "redrive", f"{saga}:saga", "--all", "--force", "--json"]) == 0
    assert orjson.loads(capsys.readouterr().out) == [{"step": "stock.OrderPlaced", "redriven": 1}]


# ------------------------------------------------------------------------------------------ rendering
@dataclasses.dataclass
class _Step:
    step: str
    backlog: int
    breaker: str


def test_to_rows_from_many_shapes() -> None:
    pt = namedtuple("pt", "a b")
    assert to_rows(None) == []
    assert to_rows([{"a": 1}]) == [{"a": 1}]
    assert to_rows([_Step("s", 3, "closed")]) == [{"step": "s", "backlog": 3, "breaker": "closed"}]
    assert to_rows([pt(1, 2)]) == [{"a": 1, "b": 2}]
    assert to_rows({"stock.OrderPlaced": {"backlog": 2}}) == [{"name": "stock.OrderPlaced", "backlog": 2}]
    import pyarrow as pa

    assert to_rows(pa.table({"a": [1, 2]})) == [{"a": 1}, {"a": 2}]
    import pandas as pd

    assert to_rows(pd.DataFrame({"a": [1]})) == [{"a": 1}]


def test_table_aligns_numbers_right_and_text_left() -> None:
    rows = [{"step": "stock.OrderPlaced", "backlog": 5, "breaker": "closed"},
            {"step": "payment.StockReserved", "backlog": 1200, "breaker": None}]
    assert table(rows).splitlines() == [
        "step                   backlog  breaker",
        "stock.OrderPlaced            5  closed",
        "payment.StockReserved     1200",
    ]
    assert table(rows, ["backlog"], {"backlog": "waiting"}).splitlines() == ["waiting", "      5", "   1200"]


def test_table_cuts_wide_cells_and_formats_values() -> None:
    out = table([{"reason": "x" * 100}], max_width=10)
    assert out.splitlines()[1] == "xxxxxxx..."
    assert cell(None) == "" and cell(True) == "yes" and cell(0.25) == "0.25" and cell(1234.56) == "1,234.6"
    assert cell(dt.datetime(2026, 1, 2, 3, 4, 5, 600)) == "2026-01-02 03:04:05"
    assert cell(b"{\"a\":1}") == '{"a":1}'
    assert cell({"x-attempt": 3}) == "x-attempt=3"


def test_json_is_valid_and_total() -> None:
    data = [{"t": dt.datetime(2026, 1, 2), "body": b"hi", "n": 1, "tags": {"b", "a"}}]
    assert orjson.loads(to_json(data)) == [{"t": "2026-01-02T00:00:00", "body": "hi", "n": 1, "tags": ["a", "b"]}]


def test_key_values_aligns_keys() -> None:
    assert key_values({"id": "m1", "attempts": 3, "headers": {"x-error": "boom"}}).splitlines() == [
        "id      : m1", "attempts: 3", "headers :", "  x-error: boom"]


def test_trace_accepts_a_correlation_id_or_a_business_key() -> None:
    corr = correlation_id_for("order-7")
    assert candidates("order-7") == [corr]
    assert candidates(corr.upper()) == [corr, correlation_id_for(corr.upper())]


def test_python_dash_m_safebunny_runs_the_cli() -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "safebunny", "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "usage: safebunny" in done.stdout and "poison" in done.stdout
