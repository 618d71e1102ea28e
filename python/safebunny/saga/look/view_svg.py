"""The saga page's pictures as inline SVG (pure): the saga's graph (:mod:`safebunny.saga.define.graph`, laid out in
layers) with each step's state in words, backlog, parked count and input rate, and one instance's trace as a
timeline with its legend; and what the page's tables share with them: how a number reads (``-`` for unknown) and
why a value is unknown (:data:`UNKNOWN`, a tooltip wherever a ``-`` shows)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from safebunny.saga.define.graph import GraphEdge, GraphNode, SagaGraph, layout

__all__ = ["graph_svg", "timeline_svg", "legend", "number", "UNKNOWN"]

_W, _H, _GAP_X, _GAP_Y, _PAD = 190, 80, 90, 34, 24


def number(value: Any, digits: int = 0) -> str:
    """A number as page text: ``-`` for unknown (None), a rate with ``digits`` decimals."""
    if value is None:
        return "-"
    if digits:
        return f"{float(value):.{digits}f}"
    return str(int(value))


#: why a value is unknown ("-"), by data-field: the page says it where the "-" is (a tooltip)
UNKNOWN = {
    "backlog": "not known: the step's queue is not declared on the broker",
    "unacked": "not known: the management API does not answer",
    "retrying": "not known: a retry tier of the step is not declared",
    "poisoned": "not known: the poison queue was not read",
    "in_rate": "no batch with messages recorded yet", "out_rate": "no batch with messages recorded yet",
    "last_batch_age": "no batch with messages recorded yet",
    "driver": "one driver, not named (SagaSettings(driver=...) names them)",
    "held": "not known: the shard's queue is not declared", "holder": "no live driver holds this shard",
    "lease_age": "no lease: no driver holds or held it", "last_driver": "no batch with messages yet, or one driver",
    "idle": "no batch with messages recorded yet", "instances": "not known: the instances could not be read "
    "(see the errors above)", "depth": "not known: the stream is not declared",
    "parked_total": "not known: the steps could not be read", "businessKey": "started without a business key "
    "(not by saga.start)", "reason": "nothing failed", "lastUpdate": "none of its messages was processed yet",
    "correlationId": "the message carries none", "errorType": "not recorded", "parkedAt": "not recorded",
    "type": "not recorded", "attempts": "not recorded", "delivery": "not recorded", "stuck_total": "not known",
    "waits": "not known: it was started on a type no step consumes, or its messages left the inboxes' window",
}


def attr(**attrs: Any) -> str:
    return "".join(f' {k.replace("_", "-")}="{escape(str(v), quote=True)}"' for k, v in attrs.items() if v is not None)


def _svg_number(value: Any, digits: int, x: float, y: float, why: str, **attrs: Any) -> str:
    """A number drawn in the graph; a ``-`` (unknown) carries its reason as a tooltip (an SVG ``<title>``)."""
    text = f'<text class="sb-num" x="{x}" y="{y}"{attr(**attrs)}>{number(value, digits)}</text>'
    return text if value is not None else f'<g{attr(data_why=why)}><title>{escape(why)}</title>{text}</g>'


def _box(node: GraphNode, x: float, y: float, step: Mapping[str, Any] | None, sink_value: Any) -> str:
    cls = {"step": "sb-step", "producer": "sb-producer", "poison": "sb-poison", "unrouted": "sb-unrouted"}[node.kind]
    if node.compensation:
        cls += " sb-comp"
    st = step["status"] if step is not None else {}
    state = st.get("state")
    if state:
        cls += f" sb-st-{state.replace(' ', '-')}"
    out = [f'<g class="sb-node {cls}"{attr(data_node=node.id, data_step_state=state)}>',
           f"<title>{escape(node.label)}: {escape(state or '')}: {escape(st.get('state_detail') or '')}</title>"
           if state else "",
           f'<rect x="{x}" y="{y}" width="{_W}" height="{_H}" rx="8"/>',
           f'<text class="sb-title" x="{x + 10}" y="{y + 18}">{escape(node.label)}'
           f'{" (compensation)" if node.compensation else ""}</text>']
    if step is not None:
        if state:
            out.append(f'<text class="sb-state-word" x="{x + 10}" y="{y + 36}"'
                       f'{attr(data_step=step["label"], data_field="state")}>{escape(state)}</text>')
        cells = [("backlog", st.get("backlog"), 0, "queued"), ("poisoned", st.get("poisoned"), 0, "parked"),
                 ("in_rate", step.get("in_rate"), 2, "in/s")]
        for i, (field, value, digits, unit) in enumerate(cells):
            cx = x + 10 + i * 60
            out.append(_svg_number(value, digits, cx, y + 58, UNKNOWN[field], data_step=step["label"],
                                   data_field=field))
            out.append(f'<text class="sb-unit" x="{cx}" y="{y + 72}">{unit}</text>')
    elif node.kind in ("poison", "unrouted"):
        field = "parked_total" if node.kind == "poison" else "depth"
        out.append(_svg_number(sink_value, 0, x + 10, y + 48, UNKNOWN[field], data_node=node.id, data_field=field))
        out.append(f'<text class="sb-unit" x="{x + 60}" y="{y + 48}">'
                   f'{"parked, all steps" if node.kind == "poison" else "messages in the stream"}</text>')
    else:
        out.append(f'<text class="sb-unit" x="{x + 10}" y="{y + 48}">producer (saga.start or yours)</text>')
    out.append("</g>")
    return "".join(out)


def _edge(e: GraphEdge, a: tuple[float, float], b: tuple[float, float], bend: int) -> str:
    (x1, y1), (x2, y2) = a, b
    if x2 > x1:  # forward: right side to left side
        sx, sy, tx, ty = x1 + _W, y1 + _H / 2, x2, y2 + _H / 2
        mid = (sx + tx) / 2
        path = f"M{sx},{sy} C{mid},{sy} {mid},{ty} {tx},{ty}"
        lx, ly = mid, (sy + ty) / 2 - 4 + bend * 12
    else:  # back or same layer: out of the bottom, into the bottom
        sx, sy, tx, ty = x1 + _W / 2, y1 + _H, x2 + _W / 2 + 14, y2 + _H
        low = max(sy, ty) + 40 + bend * 10
        path = f"M{sx},{sy} C{sx},{low} {tx},{low} {tx},{ty}"
        lx, ly = (sx + tx) / 2, low - 6
    label = f"{e.type} (compensation)" if e.kind == "compensation" else e.type
    return (f'<g class="sb-edge sb-{e.kind}"{attr(data_source=e.source, data_target=e.target, data_type=e.type)}>'
            f'<path d="{path}" marker-end="url(#sb-arrow-{e.kind})"/>'
            f'<text x="{lx}" y="{ly}" text-anchor="middle">{escape(label)}</text></g>')


_MARKERS = {"flow": "#5b6770", "compensation": "#d35400", "poison": "#c0392b", "unrouted": "#b7950b"}


def graph_svg(graph: SagaGraph, steps: Sequence[Mapping[str, Any]], parked_total: int | None,
              unrouted: int | None) -> str:
    """The saga's graph as an ``<svg>`` element, laid out by :func:`safebunny.saga.define.graph.layout`."""
    if not graph.nodes:
        return '<p class="sb-empty">The saga has no steps.</p>'
    places = layout(graph)
    layers = max(p[0] for p in places.values()) + 1
    tallest = max(p[1] for p in places.values()) + 1
    width = _PAD * 2 + layers * _W + (layers - 1) * _GAP_X
    height = _PAD * 2 + tallest * _H + (tallest - 1) * _GAP_Y + 70
    xy = {n: (_PAD + layer * (_W + _GAP_X), _PAD + row * (_H + _GAP_Y)) for n, (layer, row) in places.items()}
    by_label = {s["label"]: s for s in steps}
    markers = "".join(
        f'<marker id="sb-arrow-{k}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
        f'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="{c}"/></marker>' for k, c in _MARKERS.items())
    seen: dict[tuple[str, str], int] = {}
    edges = []
    for e in graph.edges:
        if e.kind == "poison":
            continue  # every step has one: drawn, they would cross the boxes; each box shows its parked count
        bend = seen.get((e.source, e.target), 0)
        seen[(e.source, e.target)] = bend + 1
        edges.append(_edge(e, xy[e.source], xy[e.target], bend))
    boxes = [_box(n, *xy[n.id], by_label.get(n.id), parked_total if n.kind == "poison" else unrouted)
             for n in graph.nodes]
    return (f'<svg class="sb-graph" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="saga {escape(graph.name)}">'
            f'<defs>{markers}</defs>{"".join(edges)}{"".join(boxes)}</svg>')


_STATUS_COLOUR = {"done": "#27ae60", "failed": "#e67e22", "parked": "#c0392b", "discarded": "#7f8c8d",
                  "redriven": "#2980b9"}
#: what each dot colour of the trace means
_STATUS_MEANING = {"done": "processed: effects applied, next messages sent",
                   "failed": "failed, then retried (a retry tier, or in place)", "parked": "parked in poison",
                   "discarded": "parked, then given up on (discard)", "redriven": "parked, then sent back (redrive)"}


def legend() -> str:
    """The trace's legend: each dot colour and what it means."""
    return ('<p class="sb-legend">' + "".join(
        f'<span data-legend="{k}"><span class="sb-dot" style="background:{c}"></span><b>{k}</b>: '
        f"{escape(_STATUS_MEANING[k])}</span>" for k, c in _STATUS_COLOUR.items()) + "</p>")


def timeline_svg(entries: Sequence[Mapping[str, Any]]) -> str:
    """One instance's trace (``saga.trace`` entries as dicts) as lanes per step over time: a dot per delivery,
    coloured by its outcome, joined in processing order."""
    if not entries:
        return ""
    times = [dt.datetime.fromisoformat(e["processedAt"]) for e in entries]
    t0, span = times[0], max((times[-1] - times[0]).total_seconds(), 1.0)
    lanes = list(dict.fromkeys(f"{e['node']}.{e['type']}" for e in entries))
    left, lane_h, plot_w = 190, 34, 620
    height = 30 + lane_h * len(lanes) + 20
    out = [f'<svg class="sb-timeline" xmlns="http://www.w3.org/2000/svg" width="{left + plot_w + 40}" '
           f'height="{height}">']
    for i, lane in enumerate(lanes):
        y = 30 + i * lane_h
        out.append(f'<text class="sb-lane" x="8" y="{y + 4}">{escape(lane)}</text>'
                   f'<line class="sb-lane-line" x1="{left}" y1="{y}" x2="{left + plot_w}" y2="{y}"/>')
    points = []
    for e, t in zip(entries, times, strict=True):
        x = left + plot_w * (t - t0).total_seconds() / span
        y = 30 + lanes.index(f"{e['node']}.{e['type']}") * lane_h
        points.append((x, y, e, (t - t0).total_seconds()))
    if len(points) > 1:
        out.append('<polyline class="sb-path" points="' + " ".join(f"{x:.1f},{y}" for x, y, _, _ in points) + '"/>')
    for x, y, e, offset in points:
        colour = _STATUS_COLOUR.get(e["status"], "#34495e")
        out.append(f'<circle cx="{x:.1f}" cy="{y}" r="7" fill="{colour}"><title>{escape(e["status"])} at '
                   f'+{offset:.1f} s: {escape(e["messageId"])}</title></circle>')
    out.append(f'<text class="sb-unit" x="{left}" y="{height - 4}">0 s</text>'
               f'<text class="sb-unit" x="{left + plot_w}" y="{height - 4}" text-anchor="end">+{span:.1f} s</text>')
    out.append("</svg>")
    return "".join(out)
