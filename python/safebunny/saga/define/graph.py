"""A saga as a graph of its steps (nodes) and message types (edges), laid out in layers, and as Mermaid text (pure).

Nodes are the saga's steps (``node.type``), the producers outside the saga that feed its entry steps (``saga.start``
or a producer of yours), and two sinks: ``poison`` (each step's poison queue) and ``unrouted`` (types a step
produces that no step consumes, which the exchange's alternate exchange sends to the ``<saga>.unrouted`` stream).
Edges carry a message type; ``kind`` says how it flows: ``flow``, ``compensation`` (into a step with
``compensates=``, or a ``fails_as`` failure message), ``poison`` or ``unrouted``. The layout is deterministic:
longest-path layers from the producers, then a few barycenter sweeps to order each layer, ties broken by name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["GraphNode", "GraphEdge", "SagaGraph", "graph_of", "layout", "mermaid", "POISON", "UNROUTED"]

POISON = "poison"
UNROUTED = "unrouted"


@dataclass(frozen=True)
class GraphNode:
    """A box of the graph: ``id`` (a step's ``node.type``, a producer's node name, ``poison`` or ``unrouted``),
    ``kind`` (``step``, ``producer``, ``poison``, ``unrouted``) and its text."""

    id: str
    kind: str
    label: str
    compensation: bool = False


@dataclass(frozen=True)
class GraphEdge:
    """An arrow from ``source`` to ``target`` carrying messages of ``type``; ``kind``: ``flow``, ``compensation``,
    ``poison`` or ``unrouted``."""

    source: str
    target: str
    type: str
    kind: str = "flow"


@dataclass(frozen=True)
class SagaGraph:
    """The nodes and edges of one saga."""

    name: str
    nodes: tuple[GraphNode, ...]
    edges: tuple[GraphEdge, ...]


def graph_of(name: str, steps: Sequence[Any]) -> SagaGraph:
    """The graph of saga ``name`` from its step definitions (anything with ``node``, ``consumes``, ``from_node``,
    ``produces``, ``compensates`` and ``fails_as``)."""
    nodes: dict[str, GraphNode] = {}
    edges: list[GraphEdge] = []
    step_nodes = {s.node for s in steps}
    fails_as = {(s.node, s.fails_as) for s in steps if getattr(s, "fails_as", None)}
    for s in steps:
        label = f"{s.node}.{s.consumes}"
        nodes[label] = GraphNode(label, "step", label, bool(getattr(s, "compensates", None)))
    for s in steps:
        label = f"{s.node}.{s.consumes}"
        kind = "compensation" if getattr(s, "compensates", None) or (s.from_node, s.consumes) in fails_as else "flow"
        producers = [f"{p.node}.{p.consumes}" for p in steps if p.node == s.from_node
                     and (s.consumes in tuple(p.produces) or p.fails_as == s.consumes)]
        if not producers and s.from_node not in step_nodes:
            nodes.setdefault(s.from_node, GraphNode(s.from_node, "producer", s.from_node))
            producers = [s.from_node]
        edges += [GraphEdge(p, label, s.consumes, kind) for p in producers]
    consumed = {(s.from_node, s.consumes) for s in steps}
    for s in steps:
        label = f"{s.node}.{s.consumes}"
        for t in [*tuple(s.produces), *([s.fails_as] if getattr(s, "fails_as", None) else [])]:
            if (s.node, t) not in consumed:
                nodes.setdefault(UNROUTED, GraphNode(UNROUTED, "unrouted", UNROUTED))
                edges.append(GraphEdge(label, UNROUTED, t, "unrouted"))
    if steps:
        nodes[POISON] = GraphNode(POISON, "poison", POISON)
        edges += [GraphEdge(f"{s.node}.{s.consumes}", POISON, s.consumes, "poison") for s in steps]
    unique = list(dict.fromkeys(edges))  # a type produced twice by one step is one arrow
    return SagaGraph(name, tuple(nodes.values()), tuple(unique))


def _layers(graph: SagaGraph) -> dict[str, int]:
    """Longest-path layer of each node from the producers (cycles broken: an edge back to a node on the current
    path is ignored); the sinks (poison, unrouted) one layer after the deepest step."""
    sinks = {n.id for n in graph.nodes if n.kind in ("poison", "unrouted")}
    out: dict[str, list[str]] = {}
    for e in graph.edges:
        if e.target not in sinks:
            out.setdefault(e.source, []).append(e.target)
    layer: dict[str, int] = {}
    into = {e.target for e in graph.edges}
    roots = sorted(n.id for n in graph.nodes if n.id not in sinks and n.id not in into) or sorted(
        n.id for n in graph.nodes if n.id not in sinks)[:1]

    def visit(node: str, depth: int, path: frozenset[str]) -> None:
        if layer.get(node, -1) >= depth:
            return
        layer[node] = depth
        for nxt in sorted(out.get(node, [])):
            if nxt not in path:
                visit(nxt, depth + 1, path | {nxt})

    for root in roots:
        visit(root, 0, frozenset({root}))
    for n in sorted(n.id for n in graph.nodes):  # on a cycle with no root: start from the first name
        if n not in sinks and n not in layer:
            visit(n, 0, frozenset({n}))
    last = max(layer.values(), default=-1) + 1
    for n in sinks:
        layer[n] = last
    return layer


def layout(graph: SagaGraph, sweeps: int = 4) -> dict[str, tuple[int, int]]:
    """Each node's ``(layer, position in its layer)``: deterministic for a given graph."""
    layer = _layers(graph)
    rows: dict[int, list[str]] = {}
    for node in sorted(layer):
        rows.setdefault(layer[node], []).append(node)
    preds: dict[str, list[str]] = {}
    succs: dict[str, list[str]] = {}
    for e in graph.edges:
        preds.setdefault(e.target, []).append(e.source)
        succs.setdefault(e.source, []).append(e.target)
    order = {n: i for ns in rows.values() for i, n in enumerate(ns)}

    def barycenter(node: str, neighbours: dict[str, list[str]]) -> float:
        found = [order[m] for m in neighbours.get(node, []) if m in order]
        return sum(found) / len(found) if found else float(order[node])

    for sweep in range(sweeps):
        levels = sorted(rows) if sweep % 2 == 0 else sorted(rows, reverse=True)
        neighbours = preds if sweep % 2 == 0 else succs
        for level in levels:
            rows[level].sort(key=lambda n: (barycenter(n, neighbours), n))
            order.update({n: i for i, n in enumerate(rows[level])})
    return {n: (layer[n], order[n]) for n in layer}


def _mermaid_id(node_id: str) -> str:
    return "n_" + "".join(c if c.isalnum() else "_" for c in node_id)


def mermaid(graph: SagaGraph) -> str:
    """The graph as a Mermaid flowchart (``flowchart LR``): steps as boxes, producers as rounded boxes, poison and
    unrouted as cylinders; compensation edges dotted, poison and unrouted edges dotted and labelled too."""
    lines = ["flowchart LR", f"  %% saga {graph.name}"]
    shapes = {"step": ('["', '"]'), "producer": ('(["', '"])'), "poison": ('[("', '")]'), "unrouted": ('[("', '")]')}
    for n in graph.nodes:
        left, right = shapes[n.kind]
        text = f"{n.label} (compensates)" if n.compensation else n.label
        lines.append(f"  {_mermaid_id(n.id)}{left}{text}{right}")
    for e in graph.edges:
        arrow = "-->" if e.kind == "flow" else "-.->"
        label = f"{e.type} (compensation)" if e.kind == "compensation" else e.type
        lines.append(f"  {_mermaid_id(e.source)} {arrow}|{label}| {_mermaid_id(e.target)}")
    lines += ["  classDef poison fill:#fde2e1,stroke:#c0392b", "  classDef unrouted fill:#fff3cd,stroke:#b7950b"]
    for n in graph.nodes:
        if n.kind in ("poison", "unrouted"):
            lines.append(f"  class {_mermaid_id(n.id)} {n.kind}")
    return "\n".join(lines) + "\n"
