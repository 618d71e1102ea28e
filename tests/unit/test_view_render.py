"""The saga page without a broker: the graph and its layout, the Mermaid text, and the HTML rendered from data
(safebunny.saga.define.graph, safebunny.saga.look.view_html, safebunny.saga.look.view.SagaView)."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from types import SimpleNamespace

from safebunny.saga.define.graph import graph_of, layout, mermaid
from safebunny.saga.look.view import SagaView
from safebunny.saga.look.view_html import STATE_COLOURS, STEP_FIELDS, render


def _step(node, consumes, from_node, produces=(), compensates=None, fails_as=None):  # type: ignore[no-untyped-def]
    return SimpleNamespace(node=node, consumes=consumes, from_node=from_node, produces=tuple(produces),
                           compensates=compensates, fails_as=fails_as)


STEPS = [
    _step("stock", "OrderPlaced", "orders", ["StockReserved"]),
    _step("payment", "StockReserved", "stock", ["PaymentCharged", "PaymentDeclined", "Audit"]),
    _step("shipping", "PaymentCharged", "payment", fails_as="ShippingFailed"),
    _step("stock", "PaymentDeclined", "payment", compensates="OrderPlaced"),
    _step("payment", "ShippingFailed", "shipping", compensates="StockReserved"),
]


def test_the_graph_has_steps_producers_sinks_and_marked_compensation_edges() -> None:
    g = graph_of("shop", STEPS)
    kinds = {n.id: n.kind for n in g.nodes}
    assert kinds == {"stock.OrderPlaced": "step", "payment.StockReserved": "step", "shipping.PaymentCharged": "step",
                     "stock.PaymentDeclined": "step", "payment.ShippingFailed": "step", "orders": "producer",
                     "unrouted": "unrouted", "poison": "poison"}
    edges = {(e.source, e.target, e.type, e.kind) for e in g.edges}
    assert ("orders", "stock.OrderPlaced", "OrderPlaced", "flow") in edges
    assert ("stock.OrderPlaced", "payment.StockReserved", "StockReserved", "flow") in edges
    assert ("payment.StockReserved", "stock.PaymentDeclined", "PaymentDeclined", "compensation") in edges
    # fails_as: the failure message is a compensation edge from the failing step
    assert ("shipping.PaymentCharged", "payment.ShippingFailed", "ShippingFailed", "compensation") in edges
    assert ("payment.StockReserved", "unrouted", "Audit", "unrouted") in edges  # nobody consumes Audit
    assert {e.source for e in g.edges if e.kind == "poison"} == {f"{s.node}.{s.consumes}" for s in STEPS}
    assert [n.id for n in g.nodes if n.compensation] == ["stock.PaymentDeclined", "payment.ShippingFailed"]


def test_the_layout_is_layered_by_longest_path_and_deterministic() -> None:
    g = graph_of("shop", STEPS)
    places = layout(g)
    layer = {n: p[0] for n, p in places.items()}
    assert layer["orders"] == 0 and layer["stock.OrderPlaced"] == 1 and layer["payment.StockReserved"] == 2
    assert layer["shipping.PaymentCharged"] == 3 and layer["stock.PaymentDeclined"] == 3
    assert layer["payment.ShippingFailed"] == 4 and layer["poison"] == layer["unrouted"] == 5
    rows = {}
    for lay, pos in places.values():
        rows.setdefault(lay, []).append(pos)
    assert all(sorted(p) == list(range(len(p))) for p in rows.values())  # positions 0..k-1 in each layer
    shuffled = graph_of("shop", list(reversed(STEPS)))
    assert layout(shuffled) == places  # the steps' order does not move a box


def test_a_cycle_does_not_loop_for_ever() -> None:
    steps = [_step("a", "X", "b", ["Y"]), _step("b", "Y", "a", ["X"])]
    places = layout(graph_of("loop", steps))
    assert {places["a.X"][0], places["b.Y"][0]} == {0, 1}


#: the three-step saga "shop" as Mermaid text (also what `safebunny topology show --format mermaid` prints for it)
SHOP_MERMAID = """flowchart LR
  %% saga shop
  n_stock_OrderPlaced["stock.OrderPlaced"]
  n_payment_StockReserved["payment.StockReserved"]
  n_stock_PaymentDeclined["stock.PaymentDeclined (compensates)"]
  n_orders(["orders"])
  n_poison[("poison")]
  n_orders -->|OrderPlaced| n_stock_OrderPlaced
  n_stock_OrderPlaced -->|StockReserved| n_payment_StockReserved
  n_payment_StockReserved -.->|PaymentDeclined (compensation)| n_stock_PaymentDeclined
  n_stock_OrderPlaced -.->|OrderPlaced| n_poison
  n_payment_StockReserved -.->|StockReserved| n_poison
  n_stock_PaymentDeclined -.->|PaymentDeclined| n_poison
  classDef poison fill:#fde2e1,stroke:#c0392b
  classDef unrouted fill:#fff3cd,stroke:#b7950b
  class n_poison poison
"""


def test_mermaid_text() -> None:
    steps = [_step("stock", "OrderPlaced", "orders", ["StockReserved"]),
             _step("payment", "StockReserved", "stock", ["PaymentDeclined"]),
             _step("stock", "PaymentDeclined", "payment", compensates="OrderPlaced")]
    assert mermaid(graph_of("shop", steps)) == SHOP_MERMAID


def _data(**over):  # type: ignore[no-untyped-def]
    g = graph_of("shop", STEPS[:2])
    status = {f: i + 1 for i, (f, _, _) in enumerate(STEP_FIELDS)}
    status["breaker"] = "closed"
    steps = [{"label": "stock.OrderPlaced", "compensates": None, "status": {**status, "poisoned": 1},
              "in_rate": 2.5, "out_rate": 2.0, "last_batch_age": 3.25, "restarts": 2, "driver": "host-a",
              "shard_rows": [{"shard": 0, "queue": "shop.stock.OrderPlaced.shard.0", "backlog": 4, "held": True,
                              "holder": "host-a", "lease_age_seconds": 1.5, "last_driver": "host-a",
                              "idle_seconds": 3.2, "restarts": 1}]},
             {"label": "payment.StockReserved", "compensates": None, "status": {**status, "backlog": None},
              "in_rate": None, "out_rate": None, "last_batch_age": None, "restarts": 0, "driver": None,
              "shard_rows": []}]
    data = {"saga": "shop", "broker": "amqp://guest@127.0.0.1:5672/%2F", "generated": "2026-11-28T20:00:00+00:00",
            "rate_window_s": 60.0, "graph": {"nodes": [vars(n) for n in g.nodes], "edges": [vars(e) for e in g.edges]},
            "steps": steps, "unrouted": 3,
            "poison": [{"step": "stock.OrderPlaced", "messageId": "m'1\"<x>", "correlationId": "c1", "type": "T",
                        "reason": "<script>alert(1)</script>", "errorType": "ValueError", "attempts": 3,
                        "parkedAt": "2026-11-28T19:59:00+00:00", "state": "parked", "body": "{}"}],
            "instances": {"total": 7, "counts": {"completed": 5, "parked": 1, "running": 1}, "stuck_total": 2,
                          "stuck": [{"businessKey": "o7", "correlationId": "c1", "state": "parked",
                                     "step": "stock.OrderPlaced", "lastUpdate": "2026-11-28T19:59:00+00:00",
                                     "reason": "bad"}]},
            "instance": None, "trace": None, "errors": {}}
    return {**data, **over}


class _Fields(HTMLParser):
    """Every element with a data-field: (its data attributes, its text)."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[dict[str, str], str]] = []
        self._open: list[dict[str, str] | None] = []
        self.scripts = 0
        self.bare: list[str] = []  # numbers in an element without a data-field

    def handle_starttag(self, tag, attrs):  # type: ignore[no-untyped-def]
        a = {k: v or "" for k, v in attrs}
        self.scripts += tag == "script"
        self._open.append(a if "data-field" in a else None)
        if a.get("data-field"):
            self.found.append((a, ""))

    def handle_endtag(self, tag):  # type: ignore[no-untyped-def]
        if self._open:
            self._open.pop()

    def handle_data(self, data):  # type: ignore[no-untyped-def]
        if re.fullmatch(r"\s*[-+]?\d[\d.,]*\s*", data) and not (self._open and self._open[-1] is not None):
            self.bare.append(data)
        if self._open and self._open[-1] is not None and self.found and self.found[-1][0] is self._open[-1]:
            self.found[-1] = (self.found[-1][0], self.found[-1][1] + data)


def _fields(html: str) -> _Fields:
    p = _Fields()
    p.feed(html)
    return p


def _value(p: _Fields, **want: str) -> list[str]:
    """The texts of the elements with these data attributes (a shard's cells only when ``shard`` is asked for)."""
    return [text for attrs, text in p.found
            if all(attrs.get(f"data-{k.replace('_', '-')}") == v for k, v in want.items())
            and ("shard" in want or "data-shard" not in attrs)]


def test_every_number_carries_its_data_attributes() -> None:
    page = _fields(render(_data()))
    for i, (field, _, _) in enumerate(STEP_FIELDS):
        want = str(i + 1)
        assert _value(page, step="payment.StockReserved", field=field) == (["-"] if field == "backlog" else [want]) * (
            2 if field in ("backlog", "poisoned") else 1), field  # the graph's box shows depth and parked too
    assert _value(page, step="stock.OrderPlaced", field="in_rate") == ["2.50", "2.50"]
    assert _value(page, step="stock.OrderPlaced", field="out_rate") == ["2.00"]
    assert _value(page, step="stock.OrderPlaced", field="last_batch_age") == ["3.2"]
    assert _value(page, step="stock.OrderPlaced", field="restarts") == ["2"]
    assert _value(page, step="stock.OrderPlaced", shard="0", field="backlog") == ["4"]
    assert _value(page, state="completed", field="instances") == ["5"]
    assert _value(page, state="compensated", field="instances") == ["-"]
    assert _value(page, field="instances_total") == ["7"]
    assert _value(page, node="unrouted", field="depth") == ["3", "3"]  # the graph's box and the line under the steps
    assert _value(page, step="stock.OrderPlaced", field="poisoned") == ["1", "1"]
    assert _value(page, node="poison", field="parked_total") == ["5"]  # 1 + 4: the steps' parked now
    assert _value(page, field="poison_listed") == ["1"]
    # nothing is a bare number: every text that is a number sits in an element with a data-field
    assert page.bare == []
    assert _fields("<p>queued <b>12</b></p>").bare == ["12"]  # the check sees one
    html = render(_data())  # the graph: an arrow per flow and unrouted edge, none to poison
    assert html.count('class="sb-edge sb-flow"') == 2 and html.count('class="sb-edge sb-unrouted"') == 3
    assert 'class="sb-edge sb-poison"' not in html and 'data-node="poison"' in html


def test_text_from_messages_is_escaped_and_actions_only_when_asked() -> None:
    html = render(_data())
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "sb-redrive" not in html and _fields(html).scripts == 0  # read-only and no script at all
    with_actions = render(_data(), actions=True, token="t0k")
    assert with_actions.count('data-action="redrive"') == 1 and 'data-token="t0k"' in with_actions
    # the message id reaches the script as a data attribute, never inside JavaScript source
    assert "m&#x27;1&quot;&lt;x&gt;" in with_actions and "sbAction(this)" in with_actions
    assert re.search(r"https?://", re.sub(r'xmlns="http://www.w3.org/2000/svg"', "", with_actions)) is None


def test_the_trace_timeline_when_an_instance_is_asked_for() -> None:
    trace = [{"node": "stock", "type": "OrderPlaced", "messageId": "a", "status": "failed", "reason": "x",
              "delivery": 1, "processedAt": "2026-11-28T19:00:00+00:00"},
             {"node": "stock", "type": "OrderPlaced", "messageId": "a", "status": "done", "reason": None,
              "delivery": 2, "processedAt": "2026-11-28T19:00:02+00:00"},
             {"node": "payment", "type": "StockReserved", "messageId": "b", "status": "done", "reason": None,
              "delivery": 1, "processedAt": "2026-11-28T19:00:03+00:00"}]
    html = render(_data(instance="o7", trace=trace))
    page = _fields(html)
    assert _value(page, field="trace_entries") == ["3"]
    assert page.bare == [] and _fields(render(_data(), actions=True, refresh_s=5, token="t")).bare == []
    assert _value(page, message_id="a", field="delivery") == ["1", "2"]
    assert html.count("<circle") == 3 and 'class="sb-timeline"' in html
    assert "No message of this instance" in render(_data(instance="nope", trace=[]))
    assert 'class="sb-timeline"' not in render(_data())


def test_a_section_that_could_not_be_read_says_why() -> None:
    html = render(_data(steps=[], poison=[], errors={"steps": "SafeBunnyBrokerError: broker down"}))
    assert "broker down" in html and 'class="sb-errors"' in html


def test_the_view_is_a_string_with_rich_display() -> None:
    page = SagaView("<p>x</p>", {"saga": "shop"})
    assert isinstance(page, str) and page == "<p>x</p>" and page._repr_html_() == "<p>x</p>"
    assert page.data == {"saga": "shop"} and "shop" in repr(page) and "<p>" not in repr(page)


class _Dashes(HTMLParser):
    """Every ``-`` shown on a page, and whether an element around it says why (a title or an SVG <title>)."""

    def __init__(self) -> None:
        super().__init__()
        self._open: list[dict[str, str]] = []
        self.unexplained: list[str] = []
        self.dashes = 0

    def handle_starttag(self, tag, attrs):  # type: ignore[no-untyped-def]
        if tag not in ("br", "meta", "rect", "path", "line", "circle", "polyline"):
            self._open.append({k: v or "" for k, v in attrs})

    def handle_endtag(self, tag):  # type: ignore[no-untyped-def]
        if tag not in ("br", "meta", "rect", "path", "line", "circle", "polyline") and self._open:
            self._open.pop()

    def handle_data(self, data):  # type: ignore[no-untyped-def]
        if data.strip() == "-":
            self.dashes += 1
            if not any("title" in a or "data-why" in a for a in self._open):
                self.unexplained.append(str(self._open[-1:]))


def _states_data(**over):  # type: ignore[no-untyped-def]
    data = _data(**over)
    states = [("paused", "breaker open until 05:11:46 UTC, set by saga.pause(); 4 message(s) waiting"),
              ("not consumed", "3 message(s) waiting and no consumer; the oldest has waited 75 s")]
    data["steps"] = [{**s, "status": {**s["status"], "state": st, "state_detail": detail}}
                     for s, (st, detail) in zip(data["steps"], states, strict=True)]
    return data


def test_each_step_says_its_state_in_words_and_colour_with_a_banner() -> None:
    html = render(_states_data())
    page = _fields(html)
    assert _value(page, step="stock.OrderPlaced", field="state") == ["paused", "paused"]  # the box and the row
    assert _value(page, step="payment.StockReserved", field="state") == ["not consumed", "not consumed"]
    assert "breaker open until 05:11:46 UTC" in _value(page, step="stock.OrderPlaced", field="state_detail")[0]
    assert 'class="sb-node sb-step sb-st-paused"' in html and 'class="sb-node sb-step sb-st-not-consumed"' in html
    assert 'class="sb-state sb-st-paused"' in html
    fill, outline = STATE_COLOURS["paused"]
    assert f".sb-st-paused rect{{fill:{fill};stroke:{outline}}}" in html  # the colour the box is drawn in
    banner = re.search(r'<div class="sb-banner".*?</div>', html)
    assert banner and "Not running as it should" in banner.group(0)
    assert "<b>stock.OrderPlaced</b> is <b>paused</b>: breaker open until" in banner.group(0)
    assert "<b>payment.StockReserved</b> is <b>not consumed</b>: 3 message(s) waiting" in banner.group(0)
    assert page.bare == []
    # running and idle steps need no banner; a saga-wide problem does, in status's words
    calm = _states_data()
    for s, st in zip(calm["steps"], ("running", "idle"), strict=True):
        s["status"]["state"] = st
    assert 'class="sb-banner"' not in render(calm)
    undeclared = render({**calm, "problems": ["saga 'shop' is not declared on this broker: none of its step queues "
                                              "exists."]})
    assert 'data-problem="saga"' in undeclared and "is not declared on this broker" in undeclared


def test_every_dash_says_why() -> None:
    data = _data(unrouted=None, instance="o7",
                 trace=[{"node": "stock", "type": None, "messageId": "a", "status": "done", "reason": None,
                         "delivery": None, "processedAt": "2026-11-28T19:00:00+00:00"}])
    data["steps"][1]["status"] = {**data["steps"][1]["status"], "unacked": None,
                                  "note": "unacked unknown: no management API at http://h:15672"}
    data["instances"]["stuck"][0].update(businessKey=None, reason=None, lastUpdate=None)
    data["poison"][0].update(correlationId=None, errorType=None, reason=None, parkedAt=None)
    html = render(data)
    dashes = _Dashes()
    dashes.feed(html)
    assert dashes.dashes >= 15 and dashes.unexplained == []
    assert 'title="unacked unknown: no management API at http://h:15672"' in html  # the status note, where it is
    assert "- : not known; hover over it for why." in html
    assert ">-</td>" not in render(_data()).replace('">-</td>', "")  # a dash without a title never
    old = _Dashes()
    old.feed(html.replace(" title=", " data-x="))  # the check sees a dash without a reason
    assert old.unexplained


def test_the_trace_has_a_legend_and_instance_links_work_in_both_forms() -> None:
    trace = [{"node": "stock", "type": "OrderPlaced", "messageId": "a", "status": "parked", "reason": "x",
              "delivery": 1, "processedAt": "2026-11-28T19:00:00+00:00"}]
    html = render(_data(instance="o7", trace=trace))
    for status in ("done", "failed", "parked", "discarded", "redriven"):
        assert f'data-legend="{status}"' in html
    assert "parked in poison" in html
    # a file (saga.view()) has no server: the id says where its trace opens, and links nowhere
    assert '?instance=' not in html and "its trace needs safebunny view" in html
    served = render(_data(), served=True)
    assert '<a href="?instance=c1">c1</a>' in served


def test_the_instance_list_says_where_each_waits_now() -> None:
    stuck = [{"businessKey": "o13", "correlationId": "c13", "state": "running", "step": "shipping.StockReserved",
              "lastUpdate": "2026-11-28T19:59:00+00:00", "waitingSince": "2026-11-28T19:58:00+00:00",
              "reason": None},
             {"businessKey": "o7", "correlationId": "c7", "state": "parked", "step": "stock.OrderPlaced",
              "lastUpdate": "2026-11-28T19:59:00+00:00", "reason": "bad"},
             {"businessKey": None, "correlationId": "c17", "state": "running", "step": None, "lastUpdate": None,
              "reason": None}]
    html = render(_data(instances={"total": 3, "counts": {"running": 2, "parked": 1}, "stuck_total": 3,
                                   "stuck": stuck}))
    cells = re.findall(r'<td data-field="waits">(.*?)</td>', html)
    assert cells[:2] == ["queue of shipping.StockReserved", "parked at stock.OrderPlaced"]
    assert "<span title=" in cells[2] and ">-</span>" in cells[2]  # not known, and says why
    assert "<td></td>" not in html  # no empty cell
