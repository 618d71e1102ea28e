"""The saga page as one self-contained HTML document (pure: :func:`safebunny.saga.look.view.gather`'s data in, a
string out; inline CSS, SVG and script, nothing fetched).

Every number on the page carries a stable ``data-field`` attribute with what it belongs to: ``data-step`` (a
step's ``node.type``), ``data-shard``, ``data-state`` (instances), ``data-node`` (the graph's poison and
unrouted boxes) or ``data-message-id``. The CSS is scoped under ``.sb-view``, so the page can sit inside a
notebook's output. ``actions=True`` (``safebunny view --allow-actions``) adds redrive and discard buttons to
the poison list; each asks for confirmation and posts to the server with ``token``.

The page's pictures (:mod:`safebunny.saga.look.view_svg`) are inline SVG. Each step carries its state in words and
colour (:func:`safebunny.saga.look.status.step_health`: the same words as ``status()``) in its box and its row, and a
banner at the top lists what is not as it should be. Every ``-`` (unknown) says why in a tooltip
(:data:`~safebunny.saga.look.view_svg.UNKNOWN`); in a file (``saga.view()``), an instance's id says its trace needs
``safebunny view``, whose page links it.
"""

from __future__ import annotations

from collections.abc import Mapping
from html import escape
from typing import Any

from safebunny.saga.define.graph import GraphEdge, GraphNode, SagaGraph
from safebunny.saga.look.view_svg import UNKNOWN, attr, graph_svg, legend, number, timeline_svg

__all__ = ["render", "STEP_FIELDS", "STATE_COLOURS", "banner"]

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
.sb-view .sb-comp rect{stroke-dasharray:7 3;stroke-width:2.5}
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
.sb-view .sb-state-word{font-weight:700;font-size:12px}.sb-view td.sb-state{min-width:260px}
.sb-view td.sb-state small{color:#34495e}
.sb-view .sb-banner{background:#fde2e1;border-left:5px solid #c0392b;padding:6px 12px;margin:10px 0}
.sb-view .sb-banner ul{margin:4px 0;padding-left:20px}.sb-view .sb-foot{color:#5b6770;font-size:12px;margin:2px 0}
.sb-view .sb-dot{display:inline-block;width:11px;height:11px;border-radius:6px;margin:0 4px 0 10px;
 vertical-align:-1px}
.sb-view .sb-needs-server{border-bottom:1px dotted #5b6770;cursor:help}
"""
#: each step state's colours (fill, outline): its box in the graph and its cell in the steps table
STATE_COLOURS = {"running": ("#e3f4ea", "#27ae60"), "idle": ("#f3f6f8", "#7f8c8d"),
                 "paused": ("#fff3cd", "#b7950b"), "not consumed": ("#fdebd0", "#e67e22"),
                 "failing": ("#fde2e1", "#c0392b"), "not declared": ("#ffffff", "#5b6770")}
_CSS += "".join(f".sb-view .sb-st-{k.replace(' ', '-')} rect{{fill:{f};stroke:{o}}}"
                f".sb-view td.sb-st-{k.replace(' ', '-')}{{background:{f};border-left:4px solid {o}}}"
                f".sb-view .sb-st-{k.replace(' ', '-')} .sb-state-word{{fill:{o}}}\n"
                for k, (f, o) in STATE_COLOURS.items())

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


def _td(value: Any, digits: int = 0, why: str | None = None, **attrs: Any) -> str:
    """A number's cell; an unknown one (``-``) says why in its tooltip (``why``, else :data:`UNKNOWN`)."""
    title = (why or UNKNOWN.get(str(attrs.get("field")), "not known")) if value is None else None
    return (f'<td class="sb-n"{attr(title=title, **{f"data_{k}": v for k, v in attrs.items()})}>'
            f"{number(value, digits)}</td>")


def _text(value: Any, field: str = "") -> str:
    """A text; an unknown one is a ``-`` that says why in its tooltip (:data:`UNKNOWN`)."""
    if value is None or value == "":
        return f'<span{attr(title=UNKNOWN.get(field, "not known"))}>-</span>'
    return escape(str(value))


def _state_cell(s: Mapping[str, Any]) -> str:
    st, label = s["status"], s["label"]
    state = st.get("state") or "unknown"
    return (f'<td class="sb-state sb-st-{escape(state.replace(" ", "-"), quote=True)}"><b'
            f'{attr(data_step=label, data_field="state")}>{escape(state)}</b><br><small'
            f'{attr(data_step=label, data_field="state_detail")}>{escape(st.get("state_detail") or "")}</small></td>')


def _steps_table(steps: list[Mapping[str, Any]]) -> str:
    head = "".join(f"<th>{h}</th>" for _, h, _ in STEP_FIELDS)
    rows = []
    notes = sorted({s["status"]["note"] for s in steps if s["status"].get("note")})
    for s in steps:
        st, label = s["status"], s["label"]
        cells = "".join(_td(st.get(f), d, st.get("note") if f == "unacked" else None, step=label, field=f)
                        for f, _, d in STEP_FIELDS)
        rows.append(
            f'<tr data-step="{escape(label, quote=True)}"><td><b>{escape(label)}</b>'
            f'{" <small>(compensates " + escape(s["compensates"]) + ")</small>" if s.get("compensates") else ""}'
            f"</td>{_state_cell(s)}{cells}{_td(s.get('in_rate'), 2, step=label, field='in_rate')}"
            f"{_td(s.get('out_rate'), 2, step=label, field='out_rate')}"
            f"{_td(s.get('last_batch_age'), 1, step=label, field='last_batch_age')}"
            f"{_td(s.get('restarts'), step=label, field='restarts')}"
            f"<td>{_text(s.get('driver'), 'driver')}</td><td>{_text(st.get('breaker'))}</td></tr>")
    foot = ('<p class="sb-foot">- : not known; hover over it for why.'
            + "".join(f" {escape(n)}." for n in notes) + "</p>") if steps else ""
    return (f"<table class=\"sb-steps\"><tr><th>step</th><th>state</th>{head}<th>in/s</th><th>out/s</th>"
            f"<th>last batch (s ago)</th><th>restarts</th><th>driver</th><th>breaker</th></tr>{''.join(rows)}"
            f"</table>{foot}")


def _shards_table(steps: list[Mapping[str, Any]]) -> str:
    rows = []
    for s in steps:
        for sh in s.get("shard_rows") or []:
            at = {"step": s["label"], "shard": sh["shard"]}
            held = None if sh.get("held") is None else "yes" if sh["held"] else "no"
            rows.append(f"<tr><td>{escape(s['label'])}</td>{_td(sh['shard'], **at, field='shard')}"
                        f"<td>{escape(sh['queue'])}</td>{_td(sh.get('backlog'), **at, field='backlog')}"
                        f"<td>{_text(held, 'held')}</td><td>{_text(sh.get('holder'), 'holder')}</td>"
                        f"{_td(sh.get('lease_age_seconds'), 1, **at, field='lease_age')}"
                        f"<td>{_text(sh.get('last_driver'), 'last_driver')}</td>"
                        f"{_td(sh.get('idle_seconds'), 1, **at, field='idle')}"
                        f"{_td(sh.get('restarts'), **at, field='restarts')}</tr>")
    if not rows:
        return ""
    return ("<h2>Shards</h2><table class=\"sb-shards\"><tr><th>step</th><th>shard</th><th>queue</th><th>depth</th>"
            "<th>held</th><th>holder</th><th>lease age (s)</th><th>last batch's driver</th><th>last batch (s ago)</th>"
            f"<th>restarts</th></tr>{''.join(rows)}</table>")


def _why(value: Any, field: str) -> str:
    """A tooltip attribute for an unknown number (``-``)."""
    return attr(title=UNKNOWN[field]) if value is None else ""


#: where an instance in each stuck state waits: its next message's queue, a retry tier, or the poison queue
_WAITS = {"running": "queue of {}", "retrying": "retry tier of {}", "parked": "parked at {}"}


def _instance_link(corr: str, served: bool) -> str:
    """An instance's correlation id: a link to its trace on the served page; in a file, words saying where its
    trace opens (a file has no server to ask)."""
    if served:
        return f'<a href="?instance={escape(corr, quote=True)}">{escape(corr)}</a>'
    where = f"its trace needs safebunny view (the page it serves opens it here), or saga.view(instance='{corr}')"
    return f'<span class="sb-needs-server"{attr(title=where)}>{escape(corr)}</span>'


def _instances(inst: Mapping[str, Any], states: list[str], served: bool) -> str:
    counts = inst.get("counts") or {}
    chips = "".join(f'<span class="sb-chip sb-state-{escape(s)}">{escape(s)} '
                    f'<b data-state="{escape(s, quote=True)}" data-field="instances"{_why(counts.get(s), "instances")}>'
                    f"{number(counts.get(s))}</b></span>" for s in states)
    total = (f'<span class="sb-chip">all <b data-field="instances_total"{_why(inst.get("total"), "instances")}>'
             f'{number(inst.get("total"))}</b></span>')
    stuck = inst.get("stuck") or []
    rows = "".join(
        f"<tr><td>{_text(r.get('businessKey'), 'businessKey')}</td><td>{_instance_link(r['correlationId'], served)}"
        f"</td><td>{escape(r['state'])}</td><td data-field=\"waits\">"
        + (escape(_WAITS[r["state"]].format(r["step"])) if r.get("step") and r["state"] in _WAITS else
           _text(None, "waits"))
        + f"</td><td>{_text(r.get('waitingSince') or r.get('lastUpdate'), 'lastUpdate')}</td>"
        f"<td>{_text(r.get('reason'), 'reason')}</td></tr>" for r in stuck)
    how = ("Each id opens its trace." if served else "Each instance's trace: on the page <code>safebunny view</code> "
           "serves (its ids are links there), or <code>saga.view(instance=ID)</code>.")
    listed = (f"<p>Oldest stuck (parked, retrying, running) first: {len(stuck)} of "
              f'<span data-field="stuck_total"{_why(inst.get("stuck_total"), "stuck_total")}>'
              f'{number(inst.get("stuck_total"))}</span>. {how}</p>'
              "<table class=\"sb-stuck\"><tr><th>business key</th><th>correlation id</th><th>state</th>"
              "<th>waits at now</th><th>waiting since (running) / last update</th><th>reason</th></tr>"
              f"{rows}</table>") if stuck else "<p>Nothing is stuck.</p>"
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
                   f"<td>{_text(p.get('correlationId'), 'correlationId')}</td>"
                   f"<td>{_text(p.get('errorType'), 'errorType')}</td>"
                   f"<td>{_text(p.get('reason'), 'errorType')}</td>"
                   f"{_td(p.get('attempts'), message_id=mid, field='attempts')}"
                   f"<td>{_text(p.get('state'))}</td><td>{_text(p.get('parkedAt'), 'parkedAt')}</td>{buttons}</tr>")
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
        f"<tr><td>{escape(e['processedAt'])}</td><td>{escape(e['node'])}.{_text(e.get('type'), 'type')}</td>"
        f"<td>{escape(e['status'])}</td>{_td(e.get('delivery'), message_id=e['messageId'], field='delivery')}"
        f"<td><code>{escape(e['messageId'])}</code></td><td>{_text(e.get('reason'), 'reason')}</td></tr>"
        for e in entries)
    return (f"<h2>Instance {escape(instance)} (<span data-field=\"trace_entries\">{len(entries)}</span> deliveries)"
            f"</h2>{timeline_svg(entries)}{legend()}<table class=\"sb-trace\"><tr><th>processed at</th><th>step</th>"
            f"<th>outcome</th><th>delivery</th><th>message id</th><th>reason</th></tr>{rows}</table>")


def _graph(data: Mapping[str, Any]) -> SagaGraph:
    g = data.get("graph") or {}
    return SagaGraph(data["saga"], tuple(GraphNode(**n) for n in g.get("nodes", [])),
                     tuple(GraphEdge(**e) for e in g.get("edges", [])))


def banner(data: Mapping[str, Any]) -> str:
    """What is not as it should be, at the top of the page: the saga's problems (as ``safebunny status`` says
    them) and each step in an alarming state with what it means; nothing when all is well."""
    from safebunny.saga.look.status import ALARMING, STEP_STATES

    steps = sorted((s for s in data.get("steps") or [] if s["status"].get("state") in ALARMING),
                   key=lambda s: STEP_STATES.index(s["status"]["state"]))
    items = [f'<li data-problem="saga">{escape(p)}</li>' for p in data.get("problems") or []]
    items += [f'<li{attr(data_banner_step=s["label"], data_step_state=s["status"]["state"])}><b>{escape(s["label"])}'
              f'</b> is <b>{escape(s["status"]["state"])}</b>: {escape(s["status"].get("state_detail") or "")}</li>'
              for s in steps]
    if not items:
        return ""
    return (f'<div class="sb-banner" role="alert" data-field="banner"><b>Not running as it should:</b>'
            f"<ul>{''.join(items)}</ul></div>")


def render(data: Mapping[str, Any], actions: bool = False, refresh_s: float | None = None,
           token: str | None = None, served: bool = False) -> str:
    """The page for ``data`` (:func:`safebunny.saga.look.view.gather`); ``actions``: redrive and discard buttons
    (they post to the ``safebunny view`` server with ``token``); ``refresh_s``: reload the page this often;
    ``served``: the page comes from ``safebunny view``, so its instance links can open traces."""
    from safebunny.saga.look.instance_state import STATES

    steps = list(data.get("steps") or [])
    parked_total = sum(s["status"].get("poisoned") or 0 for s in steps) if steps else None
    unrouted = data.get("unrouted")
    errors = data.get("errors") or {}
    error_html = ("<div class=\"sb-errors\">" + "".join(f"<div><b>{escape(k)}</b>: {escape(v)}</div>"
                                                       for k, v in errors.items()) + "</div>") if errors else ""
    unrouted_line = (f"<p class=\"{'sb-warn' if unrouted else ''}\">Unrouted: <span data-node=\"unrouted\" "
                     f"data-field=\"depth\"{_why(unrouted, 'depth')}>{number(unrouted)}</span> message(s)"
                     f" in <code>{escape(data['saga'])}"
                     ".unrouted</code> (types no step consumes).</p>")
    title = f"saga {data['saga']}"
    refreshing = (f' · reloads every <span data-field="refresh_s">{number(refresh_s)}</span> s'
                  if refresh_s else "")
    body = (f"<h1>{escape(title)}</h1><div class=\"sb-meta\">broker {escape(str(data.get('broker', '')))} · "
            f"generated <span data-field=\"generated\">{escape(str(data.get('generated', '')))}</span> · rates over "
            f"the last <span data-field=\"rate_window_s\">{number(data.get('rate_window_s'))}</span> s{refreshing}"
            f"</div>{banner(data)}{error_html}"
            f"<h2>Flow</h2><div class=\"sb-graph-wrap\">{graph_svg(_graph(data), steps, parked_total, unrouted)}</div>"
            f"<h2>Steps</h2>{_steps_table(steps)}{unrouted_line}{_shards_table(steps)}"
            f"{_instances(data.get('instances') or {}, list(STATES), served)}"
            f"{_poison(list(data.get('poison') or []), actions)}{_trace(data.get('instance'), data.get('trace'))}")
    script = f"<script>{_SCRIPT}</script>" if actions or refresh_s else ""
    attrs = (f' data-token="{escape(token or "", quote=True)}" data-refresh="{refresh_s or 0}"'
             f' data-saga="{escape(data["saga"], quote=True)}"')
    return (f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{escape(title)}</title>"
            f"<style>{_CSS}</style></head><body><div class=\"sb-view\" id=\"sb-view\"{attrs}>{body}</div>"
            f"{script}</body></html>")
