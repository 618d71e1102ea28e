"""The saga page as one self-contained HTML document (pure: :func:`safebunny.saga.view.gather`'s data in, a
string out; inline CSS, SVG and script, nothing fetched).

Every number on the page carries a stable ``data-field`` attribute with what it belongs to: ``data-step`` (a
step's ``node.type``), ``data-shard``, ``data-state`` (instances), ``data-node`` (the graph's poison and
unrouted boxes) or ``data-message-id``. The CSS is scoped under ``.sb-view``, so the page can sit inside a
notebook's output. ``actions=True`` (``safebunny view --allow-actions``) adds redrive and discard buttons to
the poison list; each asks for confirmation and posts to the server with ``token``.

The page's pictures are inline SVG: the saga's graph (:mod:`safebunny.saga.graph`, laid out in layers) with each
step's backlog, parked count and input rate, and one instance's trace as a timeline. Each step's edge to the
poison sink is left out of the picture (every step has one, and drawn they would cross the boxes): the poison
box shows the parked total and each step's box its own. Every number drawn carries the same ``data-*``
attributes as the tables, so a test reads the same values from either.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from safebunny.saga.graph import GraphEdge, GraphNode, SagaGraph, layout

__all__ = ["render", "STEP_FIELDS"]

#: the per-step columns: (data-field, header, decimals); the first group are ``StepStatus`` fields
STEP_FIELDS: tuple[tuple[str, str, int], ...] = (
    ("backlog", "queue depth", 0), ("unacked", "unacked", 0), ("retrying", "retrying", 0),
    ("poisoned", "parked now", 0), ("batches", "batches", 0), ("received", "received", 0),
    ("processed", "processed", 0), ("duplicates", "duplicates", 0), ("failed", "failed", 0),
    ("retried", "retried", 0), ("parked", "parked (total)", 0),
)
_CSS = """
.sb-view{font:14px/1.4 -apple-system,'Segoe UI',Roboto,Helvetica,Arial,sans-serif;color:#1f2d3a;background:#fff;
 padding:12px 16px;max-width:1400px}
.sb-view h1{font-size:20px;margin:0 0 4px}.sb-view h2{font-size:16px;margin:22px 0 8px;border-bottom:1px solid #dde3e8}
.sb-view .sb-meta{color:#5b6770;font-size:12px}
.sb-view table{border-collapse:collapse;font-size:13px;margin:4px 0}
.sb-view th,.sb-view td{border:1px solid #dde3e8;padding:3px 8px;text-align:left;vertical-align:top}
.sb-view th{background:#f3f6f8;font-weight:600}.sb-view td.sb-n{text-align:right;font-variant-numeric:tabular-nums}
.sb-view .sb-warn{color:#c0392b;font-weight:600}.sb-view .sb-errors{background:#fdecea;padding:6px 10px}
.sb-view .sb-graph-wrap{overflow-x:auto;border:1px solid #dde3e8;border-radius:6px;background:#fbfcfd}
.sb-view svg text{font-family:inherit}
.sb-view .sb-node rect{fill:#eaf2fb;stroke:#2e6da4;stroke-width:1.5}
.sb-view .sb-producer rect{fill:#f3f6f8;stroke:#7f8c8d;stroke-dasharray:4 3}
.sb-view .sb-comp rect{fill:#fdf0e6;stroke:#d35400}
.sb-view .sb-poison rect{fill:#fde2e1;stroke:#c0392b}.sb-view .sb-unrouted rect{fill:#fff3cd;stroke:#b7950b}
.sb-view .sb-title{font-weight:600;font-size:13px}.sb-view .sb-num{font-weight:700;font-size:14px}
.sb-view .sb-unit{font-size:10px;fill:#5b6770}
.sb-view .sb-edge path{fill:none;stroke-width:1.6}.sb-view .sb-edge text{font-size:11px;fill:#34495e}
.sb-view .sb-flow path{stroke:#5b6770}.sb-view .sb-compensation path{stroke:#d35400;stroke-dasharray:6 4}
.sb-view .sb-poison path{stroke:#c0392b;stroke-dasharray:2 4}
.sb-view .sb-unrouted path{stroke:#b7950b;stroke-dasharray:2 4}
.sb-view .sb-chip{display:inline-block;padding:1px 8px;border-radius:10px;background:#eef1f4;margin:2px 6px 2px 0}
.sb-view .sb-state-parked,.sb-view .sb-state-retrying{background:#fde2e1}
.sb-view .sb-state-completed{background:#e3f4ea}.sb-view .sb-state-compensated{background:#fdf0e6}
.sb-view .sb-lane{font-size:12px}.sb-view .sb-lane-line{stroke:#dde3e8}
.sb-view .sb-path{fill:none;stroke:#95a5a6;stroke-width:1.2}
.sb-view button{font-size:12px;margin-right:4px;cursor:pointer}
.sb-view code{font-size:12px;background:#f3f6f8;padding:0 3px}
"""

_SCRIPT = """
(function(){
  var view=document.getElementById('sb-view'), token=view.getAttribute('data-token');
  var refresh=parseFloat(view.getAttribute('data-refresh')||'0'), busy=false;
  window.sbAction=function(button){
    var kind=button.getAttribute('data-action'), step=button.getAttribute('data-step');
    var id=button.getAttribute('data-message-id');
    busy=true;
    var reason=null;
    if(kind==='discard'){
      reason=window.prompt('Discard message '+id+' of step '+step+' for good. Reason (recorded):','');
      if(!reason){busy=false;return;}
    }
    if(!window.confirm((kind==='redrive'?'Redrive':'Discard')+' message '+id+' of step '+step+'?')){busy=false;return;}
    fetch('actions/'+kind,{method:'POST',headers:{'Content-Type':'application/json','X-SafeBunny-Token':token},
      body:JSON.stringify({step:step,id:id,reason:reason})})
    .then(function(r){return r.json();})
    .then(function(j){var out=document.getElementById('sb-action-result');out.textContent=j.message;
      out.setAttribute('data-ok',j.ok?'1':'0');busy=false;})
    .catch(function(e){document.getElementById('sb-action-result').textContent=String(e);busy=false;});
  };
  if(refresh>0){setInterval(function(){if(!busy){location.reload();}},refresh*1000);}
})();
"""


_W, _H, _GAP_X, _GAP_Y, _PAD = 190, 62, 90, 34, 24


def number(value: Any, digits: int = 0) -> str:
    """A number as page text: ``-`` for unknown (None), a rate with ``digits`` decimals."""
    if value is None:
        return "-"
    if digits:
        return f"{float(value):.{digits}f}"
    return str(int(value))


def _attr(**attrs: Any) -> str:
    return "".join(f' {k.replace("_", "-")}="{escape(str(v), quote=True)}"' for k, v in attrs.items() if v is not None)


def _box(node: GraphNode, x: float, y: float, step: Mapping[str, Any] | None, sink_value: Any) -> str:
    cls = {"step": "sb-step", "producer": "sb-producer", "poison": "sb-poison", "unrouted": "sb-unrouted"}[node.kind]
    if node.compensation:
        cls += " sb-comp"
    out = [f'<g class="sb-node {cls}"{_attr(data_node=node.id)}>',
           f'<rect x="{x}" y="{y}" width="{_W}" height="{_H}" rx="8"/>',
           f'<text class="sb-title" x="{x + 10}" y="{y + 20}">{escape(node.label)}</text>']
    if step is not None:
        st = step["status"]
        cells = [("backlog", st.get("backlog"), 0, "queued"), ("poisoned", st.get("poisoned"), 0, "parked"),
                 ("in_rate", step.get("in_rate"), 2, "in/s")]
        for i, (field, value, digits, unit) in enumerate(cells):
            cx = x + 10 + i * 60
            out.append(f'<text class="sb-num" x="{cx}" y="{y + 42}"{_attr(data_step=step["label"], data_field=field)}'
                       f'>{number(value, digits)}</text>')
            out.append(f'<text class="sb-unit" x="{cx}" y="{y + 55}">{unit}</text>')
    elif node.kind in ("poison", "unrouted"):
        field = "parked_total" if node.kind == "poison" else "depth"
        out.append(f'<text class="sb-num" x="{x + 10}" y="{y + 44}"{_attr(data_node=node.id, data_field=field)}>'
                   f'{number(sink_value)}</text>')
        out.append(f'<text class="sb-unit" x="{x + 60}" y="{y + 44}">'
                   f'{"parked, all steps" if node.kind == "poison" else "messages in the stream"}</text>')
    else:
        out.append(f'<text class="sb-unit" x="{x + 10}" y="{y + 44}">producer (saga.start or yours)</text>')
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
    return (f'<g class="sb-edge sb-{e.kind}"{_attr(data_source=e.source, data_target=e.target, data_type=e.type)}>'
            f'<path d="{path}" marker-end="url(#sb-arrow-{e.kind})"/>'
            f'<text x="{lx}" y="{ly}" text-anchor="middle">{escape(label)}</text></g>')


_MARKERS = {"flow": "#5b6770", "compensation": "#d35400", "poison": "#c0392b", "unrouted": "#b7950b"}


def graph_svg(graph: SagaGraph, steps: Sequence[Mapping[str, Any]], parked_total: int | None,
              unrouted: int | None) -> str:
    """The saga's graph as an ``<svg>`` element, laid out by :func:`safebunny.saga.graph.layout`."""
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


def _td(value: Any, digits: int = 0, **attrs: Any) -> str:
    return f'<td class="sb-n"{_attr(**{f"data_{k}": v for k, v in attrs.items()})}>{number(value, digits)}</td>'


def _text(value: Any) -> str:
    return "" if value is None else escape(str(value))


def _steps_table(steps: list[Mapping[str, Any]]) -> str:
    head = "".join(f"<th>{h}</th>" for _, h, _ in STEP_FIELDS)
    rows = []
    for s in steps:
        st, label = s["status"], s["label"]
        cells = "".join(_td(st.get(f), d, step=label, field=f) for f, _, d in STEP_FIELDS)
        rows.append(
            f'<tr data-step="{escape(label, quote=True)}"><td><b>{escape(label)}</b>'
            f'{" <small>(compensates " + escape(s["compensates"]) + ")</small>" if s.get("compensates") else ""}'
            f"</td>{cells}{_td(s.get('in_rate'), 2, step=label, field='in_rate')}"
            f"{_td(s.get('out_rate'), 2, step=label, field='out_rate')}"
            f"{_td(s.get('last_batch_age'), 1, step=label, field='last_batch_age')}"
            f"{_td(s.get('restarts'), step=label, field='restarts')}"
            f"<td>{_text(s.get('driver'))}</td><td>{_text(st.get('breaker'))}</td></tr>")
    return (f"<table class=\"sb-steps\"><tr><th>step</th>{head}<th>in/s</th><th>out/s</th><th>last batch (s ago)</th>"
            f"<th>restarts</th><th>driver</th><th>breaker</th></tr>{''.join(rows)}</table>")


def _shards_table(steps: list[Mapping[str, Any]]) -> str:
    rows = []
    for s in steps:
        for sh in s.get("shard_rows") or []:
            at = {"step": s["label"], "shard": sh["shard"]}
            held = "" if sh.get("held") is None else "yes" if sh["held"] else "no"
            rows.append(f"<tr><td>{escape(s['label'])}</td>{_td(sh['shard'], **at, field='shard')}"
                        f"<td>{escape(sh['queue'])}</td>{_td(sh.get('backlog'), **at, field='backlog')}"
                        f"<td>{held}</td><td>{_text(sh.get('holder'))}</td>"
                        f"{_td(sh.get('lease_age_seconds'), 1, **at, field='lease_age')}"
                        f"<td>{_text(sh.get('last_driver'))}</td>{_td(sh.get('idle_seconds'), 1, **at, field='idle')}"
                        f"{_td(sh.get('restarts'), **at, field='restarts')}</tr>")
    if not rows:
        return ""
    return ("<h2>Shards</h2><table class=\"sb-shards\"><tr><th>step</th><th>shard</th><th>queue</th><th>depth</th>"
            "<th>held</th><th>holder</th><th>lease age (s)</th><th>last batch's driver</th><th>last batch (s ago)</th>"
            f"<th>restarts</th></tr>{''.join(rows)}</table>")


def _instances(inst: Mapping[str, Any], states: list[str]) -> str:
    counts = inst.get("counts") or {}
    chips = "".join(f'<span class="sb-chip sb-state-{escape(s)}">{escape(s)} '
                    f'<b data-state="{escape(s, quote=True)}" data-field="instances">{number(counts.get(s))}</b></span>'
                    for s in states)
    total = f'<span class="sb-chip">all <b data-field="instances_total">{number(inst.get("total"))}</b></span>'
    stuck = inst.get("stuck") or []
    rows = "".join(
        f"<tr><td>{_text(r.get('businessKey'))}</td><td><a href=\"?instance={escape(r['correlationId'], quote=True)}\">"
        f"{escape(r['correlationId'])}</a></td><td>{escape(r['state'])}</td><td>{_text(r.get('step'))}</td>"
        f"<td>{_text(r.get('lastUpdate'))}</td><td>{_text(r.get('reason'))}</td></tr>" for r in stuck)
    listed = (f"<p>Oldest stuck (parked, retrying, running) first: {len(stuck)} of "
              f'<span data-field="stuck_total">{number(inst.get("stuck_total"))}</span>.</p>'
              "<table class=\"sb-stuck\"><tr><th>business key</th><th>correlation id</th><th>state</th><th>step</th>"
              f"<th>last update</th><th>reason</th></tr>{rows}</table>") if stuck else "<p>Nothing is stuck.</p>"
    return f"<h2>Instances</h2><div>{total}{chips}</div>{listed}"


def _poison(rows: list[Mapping[str, Any]], actions: bool) -> str:
    if not rows:
        return "<h2>Poison</h2><p>No parked messages.</p>"
    out = []
    for p in rows:
        mid = str(p.get("messageId") or "")
        q = {"step": escape(p["step"], quote=True), "id": escape(mid, quote=True)}
        buttons = "<td>" + "".join(
            f'<button class="sb-{kind}" data-action="{kind}" data-step="{q["step"]}" data-message-id="{q["id"]}" '
            f'onclick="sbAction(this)">{kind}</button>' for kind in ("redrive", "discard")) + "</td>" if actions else ""
        out.append(f'<tr data-message-id="{q["id"]}"><td>{escape(p["step"])}</td><td><code>{escape(mid)}</code></td>'
                   f"<td>{_text(p.get('correlationId'))}</td><td>{_text(p.get('errorType'))}</td>"
                   f"<td>{_text(p.get('reason'))}</td>{_td(p.get('attempts'), message_id=mid, field='attempts')}"
                   f"<td>{_text(p.get('state'))}</td><td>{_text(p.get('parkedAt'))}</td>{buttons}</tr>")
    head = "<th>actions</th>" if actions else ""
    return (f"<h2>Poison (<span data-field=\"poison_listed\">{len(rows)}</span> parked)</h2>"
            "<table class=\"sb-poison-list\"><tr><th>step</th><th>message id</th><th>correlation id</th>"
            f"<th>error type</th><th>reason</th><th>attempts</th><th>state</th><th>parked at</th>{head}</tr>"
            f"{''.join(out)}</table><p id=\"sb-action-result\" role=\"status\"></p>")


def _trace(instance: str | None, entries: list[Mapping[str, Any]] | None) -> str:
    if not instance:
        return ""
    if not entries:
        return f"<h2>Instance {escape(instance)}</h2><p>No message of this instance in the inboxes.</p>"
    rows = "".join(
        f"<tr><td>{escape(e['processedAt'])}</td><td>{escape(e['node'])}.{_text(e.get('type'))}</td>"
        f"<td>{escape(e['status'])}</td>{_td(e.get('delivery'), message_id=e['messageId'], field='delivery')}"
        f"<td><code>{escape(e['messageId'])}</code></td><td>{_text(e.get('reason'))}</td></tr>" for e in entries)
    return (f"<h2>Instance {escape(instance)} (<span data-field=\"trace_entries\">{len(entries)}</span> deliveries)"
            f"</h2>{timeline_svg(entries)}<table class=\"sb-trace\"><tr><th>processed at</th><th>step</th>"
            f"<th>outcome</th><th>delivery</th><th>message id</th><th>reason</th></tr>{rows}</table>")


def _graph(data: Mapping[str, Any]) -> SagaGraph:
    g = data.get("graph") or {}
    return SagaGraph(data["saga"], tuple(GraphNode(**n) for n in g.get("nodes", [])),
                     tuple(GraphEdge(**e) for e in g.get("edges", [])))


def render(data: Mapping[str, Any], actions: bool = False, refresh_s: float | None = None,
           token: str | None = None) -> str:
    """The page for ``data`` (:func:`safebunny.saga.view.gather`); ``actions``: redrive and discard buttons
    (they post to the ``safebunny view`` server with ``token``); ``refresh_s``: reload the page this often."""
    from safebunny.saga.instance_state import STATES

    steps = list(data.get("steps") or [])
    parked_total = sum(s["status"].get("poisoned") or 0 for s in steps) if steps else None
    unrouted = data.get("unrouted")
    errors = data.get("errors") or {}
    error_html = ("<div class=\"sb-errors\">" + "".join(f"<div><b>{escape(k)}</b>: {escape(v)}</div>"
                                                       for k, v in errors.items()) + "</div>") if errors else ""
    unrouted_line = (f"<p class=\"{'sb-warn' if unrouted else ''}\">Unrouted: <span data-node=\"unrouted\" "
                     f"data-field=\"depth\">{number(unrouted)}</span> message(s) in <code>{escape(data['saga'])}"
                     ".unrouted</code> (types no step consumes).</p>")
    title = f"saga {data['saga']}"
    refreshing = (f' · reloads every <span data-field="refresh_s">{number(refresh_s)}</span> s'
                  if refresh_s else "")
    body = (f"<h1>{escape(title)}</h1><div class=\"sb-meta\">broker {escape(str(data.get('broker', '')))} · "
            f"generated <span data-field=\"generated\">{escape(str(data.get('generated', '')))}</span> · rates over "
            f"the last <span data-field=\"rate_window_s\">{number(data.get('rate_window_s'))}</span> s{refreshing}"
            f"</div>{error_html}"
            f"<h2>Flow</h2><div class=\"sb-graph-wrap\">{graph_svg(_graph(data), steps, parked_total, unrouted)}</div>"
            f"<h2>Steps</h2>{_steps_table(steps)}{unrouted_line}{_shards_table(steps)}"
            f"{_instances(data.get('instances') or {}, list(STATES))}"
            f"{_poison(list(data.get('poison') or []), actions)}{_trace(data.get('instance'), data.get('trace'))}")
    script = f"<script>{_SCRIPT}</script>" if actions or refresh_s else ""
    attrs = (f' data-token="{escape(token or "", quote=True)}" data-refresh="{refresh_s or 0}"'
             f' data-saga="{escape(data["saga"], quote=True)}"')
    return (f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{escape(title)}</title>"
            f"<style>{_CSS}</style></head><body><div class=\"sb-view\" id=\"sb-view\"{attrs}>{body}</div>"
            f"{script}</body></html>")
