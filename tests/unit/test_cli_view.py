"""``safebunny view`` and ``safebunny topology show --format mermaid`` without a broker: parsing, the Mermaid
text of a saga file, and the page server's gate on actions (read-only by default, a token otherwise)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from test_view_render import SHOP_MERMAID

from safebunny.cli import exits
from safebunny.cli.locate import load_saga
from safebunny.cli.main import build_parser, main
from safebunny.cli.view import ViewServer

SAGA = '''
import safebunny

saga = safebunny.Saga("shop", uri="amqp://guest:s3cret@127.0.0.1:1/%2F", root={root!r})


@saga.step("stock", consumes="OrderPlaced", from_node="orders", schema="orderId string",
           produces=["StockReserved"])
def reserve(orders, ctx):
    return None


@saga.step("payment", consumes="StockReserved", from_node="stock", schema="orderId string",
           produces=["PaymentDeclined"])
def charge(reserved, ctx):
    return None


@saga.step("stock", consumes="PaymentDeclined", from_node="payment", schema="orderId string",
           compensates="OrderPlaced")
def release(declined, ctx):
    return None
'''


@pytest.fixture
def saga_file(tmp_path: Path) -> Path:
    path = tmp_path / "shop_saga.py"
    path.write_text(SAGA.format(root=str(tmp_path / "root")))
    return path


def test_view_parses_with_safe_defaults() -> None:
    args = build_parser().parse_args(["view", "m:s"])
    assert (args.host, args.port, args.refresh, args.allow_actions) == ("127.0.0.1", 8765, 10.0, False)
    args = build_parser().parse_args(["view", "m:s", "--port", "0", "--refresh", "2", "--allow-actions"])
    assert (args.port, args.refresh, args.allow_actions) == (0, 2.0, True)
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(["view", "m:s", "--refresh", "0"])
    assert info.value.code == exits.USAGE


def test_topology_show_as_mermaid(saga_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topology", "show", str(saga_file), "--format", "mermaid"]) == 0  # no broker needed
    assert capsys.readouterr().out == SHOP_MERMAID


def _post(url: str, body: object, token: str | None = None) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json", **({"X-SafeBunny-Token": token} if token is not None else {})}
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.mark.parametrize("actions", [False, True])
def test_actions_need_the_flag_and_the_pages_token(saga_file: Path, actions: bool) -> None:
    server = ViewServer(load_saga(str(saga_file)), port=0, actions=actions).start()
    try:
        assert server.url.startswith("http://127.0.0.1:")
        action = server.url + "actions/redrive"
        code, reply = _post(action, {"step": "stock.OrderPlaced", "id": "m1"}, server.token)
        if not actions:
            assert (code, reply["ok"]) == (403, False) and "--allow-actions" in reply["message"]
            return
        assert _post(action, {"step": "stock.OrderPlaced", "id": "m1"})[0] == 403  # no token
        assert _post(action, {"step": "stock.OrderPlaced", "id": "m1"}, "guess")[0] == 403
        code, reply = _post(action, {"step": "stock.OrderPlaced"}, server.token)
        assert (code, reply["message"]) == (400, "an action needs 'step' and 'id'")
        code, reply = _post(action, {"step": "nope", "id": "m1"}, server.token)
        assert code == 409 and "names no step" in reply["message"]
        assert _post(server.url + "actions/delete", {}, server.token)[0] == 404
    finally:
        server.stop()


def test_view_has_a_one_shot_form() -> None:
    args = build_parser().parse_args(["view", "shop.py", "--once", "--out", "page.html"])
    assert args.once and args.out == "page.html"
    assert not build_parser().parse_args(["view", "shop.py"]).once
