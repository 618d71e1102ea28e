"""The core's packages depend one way: plugin -> core; saga -> exactly_once -> delta -> storage; exactly_once ->
amqp/streams -> top level.

Read from the source with ``ast`` (no imports run), so a forbidden import fails here before it can
hide behind a lazy import path at run time.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[2] / "python" / "safebunny"

# package -> the safebunny packages it must never import
FORBIDDEN = {
    "amqp": {"queues", "delta", "exactly_once", "saga", "cli", "demo", "spark"},
    "queues": {"streams", "delta", "exactly_once", "saga", "cli", "demo", "spark"},
    "streams": {"delta", "exactly_once", "saga", "cli", "demo", "spark"},
    "exactly_once": {"saga", "cli", "demo"},
    "saga": {"cli", "demo"},
    "options": {"amqp", "streams", "delta", "exactly_once", "saga", "cli", "demo", "spark"},
    "spark": {"amqp", "queues", "streams", "delta", "exactly_once", "saga", "cli", "demo"},
}
#: package -> the only safebunny modules and packages it may import (besides its own): the Delta tables sit on
#: the storage layer and know nothing of steps, sagas or the broker
ONLY = {"storage": {"errors"}, "delta": {"storage", "errors"}}
# the one documented exception: safebunny.register(spark) hands Spark the plugin's DefaultSource
PLUGIN_ALLOWED = {"__init__.py"}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_LAZY" for t in node.targets)
              and isinstance(node.value, ast.Dict)):
            # a package's re-exports imported on first use (safebunny._lazy): name -> module, as if imported
            for module in node.value.values:
                assert isinstance(module, ast.Constant) and isinstance(module.value, str), (
                    f"{path}: _LAZY values must be module names written out")
                names.add(module.value)
    return names


def _modules() -> list[Path]:
    return sorted(CORE.rglob("*.py"))


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(CORE)))
def test_dependencies_point_one_way(path: Path) -> None:
    rel = path.relative_to(CORE)
    imported = _imports(path)
    if str(rel) not in PLUGIN_ALLOWED:
        assert not any(n.split(".")[0] == "pyspark_safebunny" for n in imported), (
            f"{rel} imports the Spark plugin; the plugin uses the core, never the reverse")
    package = rel.parts[0] if len(rel.parts) > 1 else None
    for banned in FORBIDDEN.get(package or "", set()):
        hits = sorted(n for n in imported if n == f"safebunny.{banned}" or n.startswith(f"safebunny.{banned}."))
        assert not hits, f"{rel} (package {package}) imports {hits}; {package} must not depend on {banned}"
    if package in ONLY:
        allowed = ONLY[package] | {package}
        hits = sorted(n for n in imported if n.split(".")[0] == "safebunny" and n != "safebunny"
                      and n.split(".")[1] not in allowed)
        assert not hits, f"{rel} (package {package}) imports {hits}; {package} may import only {sorted(allowed)}"


def test_every_package_declares_all() -> None:
    missing = [str(p.relative_to(CORE)) for p in CORE.rglob("__init__.py") if "__all__" not in p.read_text()]
    assert not missing, f"packages without an explicit __all__: {missing}"


# -- one settings style ---------------------------------------------------------------------------
#: names that hold options: ``options``, ``opts``, ``parsed``, ``raw_options``, ``self.options``...
_OPTION_NAME = re.compile(r"^(opts|parsed|(\w+_)?options?)$")


def _string_keyed_option_reads(source: str) -> list[str]:
    """``options["queue"]``, ``opts.get("uri")`` and the like: an option read (or write) by its string name."""
    found: list[tuple[int, int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Subscript):
            holder, key = node.value, node.slice
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("get", "pop", "setdefault") and node.args):
            holder, key = node.func.value, node.args[0]
        else:
            continue
        name = holder.attr if isinstance(holder, ast.Attribute) else holder.id if isinstance(holder, ast.Name) else ""
        if _OPTION_NAME.match(name) and isinstance(key, ast.Constant) and isinstance(key.value, str):
            found.append((node.lineno, node.col_offset, f"line {node.lineno}: {ast.unparse(node)}"))
    return [hit for *_, hit in sorted(found)]


_ROOT = CORE.parents[1]


_OUTSIDE_OPTIONS = [p for folder in ("python", "connector") for p in sorted((_ROOT / folder).rglob("*.py"))
                    if "options" not in p.relative_to(_ROOT).parts]


@pytest.mark.parametrize("path", _OUTSIDE_OPTIONS, ids=lambda p: str(p.relative_to(_ROOT)))
def test_options_are_read_by_attribute_outside_the_option_tables(path: Path) -> None:
    """Options are parsed once, by the OptionSpec tables in ``safebunny/options/``, into typed objects
    (``SourceOptions``, ``SinkOptions``, ``ConnectionSettings``) read by attribute; code that needs Spark's
    strings renders them with ``spark_options()``. A string-keyed read elsewhere is a second style coming back."""
    hits = _string_keyed_option_reads(path.read_text(encoding="utf-8"))
    assert not hits, f"{path.relative_to(_ROOT)} reads options by string key: {hits}; read the typed object instead"


def test_the_option_read_check_finds_string_keyed_reads() -> None:
    source = ('x = options["queue"]\ny = self.options.get("uri")\nz = opts["maxInFlight"] / 1000\n'
              'raw_options.pop("password")\nkeep = options.queue\ncols.get("routingKey")\n')
    assert [hit.split(": ")[1] for hit in _string_keyed_option_reads(source)] == [
        "options['queue']", "self.options.get('uri')", "opts['maxInFlight']", "raw_options.pop('password')"]


LAZY_PACKAGES = ("safebunny", "safebunny.exactly_once", "safebunny.saga")


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_every_lazy_export_resolves_to_its_module(package: str) -> None:
    import importlib

    module = importlib.import_module(package)
    for name in module.__all__:
        assert getattr(module, name) is not None, f"{package}.{name}"
        assert name in dir(module)
    for name, source in module._LAZY.items():
        assert name in module.__all__, f"{package}._LAZY names {name!r}, which __all__ does not export"
        assert getattr(module, name) is getattr(importlib.import_module(source), name)
    with pytest.raises(AttributeError, match="has no attribute 'nothing_here'"):
        module.nothing_here  # noqa: B018


def test_the_source_modules_load_without_the_inbox() -> None:
    """Spark starts a Python process per query for the source reader and one per worker: importing the
    reader must not load pandas or pyarrow.dataset (the inbox's), 0.3-1 s per process here."""
    import subprocess
    import sys

    code = ("import sys, pyspark_safebunny.queue_reader, pyspark_safebunny.stream_queue_reader; "
            "print(sorted(m for m in ('pandas', 'pyarrow.dataset', 'deltalake', 'safebunny.exactly_once.inbox') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# -- size and cycles ------------------------------------------------------------------------------
MAX_LINES = 450
REPO = CORE.parents[1]
#: files over the limit that are waiting to be split by concern; each may not grow past its size here
OVERSIZED: dict[str, int] = {}


def test_no_file_is_over_the_size_limit() -> None:
    sizes = {str(p.relative_to(REPO)): len(p.read_text(encoding="utf-8").splitlines())
             for folder in ("python", "connector") for p in (REPO / folder).rglob("*.py")}
    over = {f: n for f, n in sizes.items() if n > OVERSIZED.get(f, MAX_LINES)}
    assert not over, f"files over {MAX_LINES} lines (split them by concern): {over}"
    stale = {f for f, cap in OVERSIZED.items() if sizes.get(f, 0) <= MAX_LINES}
    assert not stale, f"these files are within {MAX_LINES} lines now; take them out of OVERSIZED: {stale}"


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle in a directed graph as a path [a, b, ..., a], or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            found = visit(start)
            if found:
                return found
    return None


def test_the_cycle_finder_finds_a_cycle_and_only_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"x": {"x"}}) == ["x", "x"]


#: top-level modules that are a node of their own in the folder graph
_TOP = {"errors": "<errors>"}


def _folder_graph() -> dict[str, set[str]]:
    """Which of the core's folders import which (the top-level modules count as one folder, "<top>", but for
    ``errors``, which imports nothing of safebunny and which every folder may use: its own node, "<errors>";
    the package's own ``__init__`` re-exports everything and ``__main__``, ``python -m safebunny``, runs the
    command line: both are entry points that nothing imports, and are left out)."""
    graph: dict[str, set[str]] = {}
    for path in _modules():
        rel = path.relative_to(CORE)
        if rel in (Path("__init__.py"), Path("__main__.py")):
            continue
        source = rel.parts[0] if len(rel.parts) > 1 else _TOP.get(rel.stem, "<top>")
        for name in _imports(path):
            parts = name.split(".")
            if parts[0] != "safebunny" or len(parts) < 2:
                continue
            target = parts[1] if (CORE / parts[1]).is_dir() else _TOP.get(parts[1], "<top>")
            if target != source:
                graph.setdefault(source, set()).add(target)
    return graph


def test_errors_imports_nothing_of_safebunny() -> None:
    """``errors`` is a node of its own in the folder graph only while it depends on nothing."""
    assert not [n for n in _imports(CORE / "errors.py") if n.split(".")[0] == "safebunny"]


def test_no_import_cycle_between_folders() -> None:
    cycle = find_cycle(_folder_graph())
    assert cycle is None, f"the core's folders import each other in a cycle: {' -> '.join(cycle or [])}"


def test_no_import_cycle_between_the_steps_concerns() -> None:
    """``exactly_once``'s sub-packages (protocol, handlers, collect, claims, emits, inbox) import one way too (its
    top-level modules, ``outcome`` and ``context``, are one node; its ``__init__`` re-exports and is left out)."""
    package = CORE / "exactly_once"
    graph: dict[str, set[str]] = {}
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package)
        if rel == Path("__init__.py"):
            continue
        source = rel.parts[0] if len(rel.parts) > 1 else "<top>"
        for name in _imports(path):
            parts = name.split(".")
            if parts[:2] == ["safebunny", "exactly_once"] and len(parts) > 2:
                target = parts[2] if (package / parts[2]).is_dir() else "<top>"
                if target != source:
                    graph.setdefault(source, set()).add(target)
    cycle = find_cycle(graph)
    assert cycle is None, f"exactly_once's sub-packages import each other in a cycle: {' -> '.join(cycle or [])}"


PLUGIN = REPO / "connector" / "pyspark_safebunny"


def _plugin_graph(folder: Path = PLUGIN) -> dict[str, set[str]]:
    """Which of the plugin's modules import which, lazy imports inside functions included (the plugin is flat,
    so its modules are the nodes; its ``__init__`` re-exports and is left out)."""
    graph: dict[str, set[str]] = {}
    for path in sorted(folder.glob("*.py")):
        if path.name == "__init__.py":
            continue
        for name in _imports(path):
            parts = name.split(".")
            if parts[0] == folder.name and len(parts) > 1 and (folder / f"{parts[1]}.py").exists():
                if parts[1] != path.stem:
                    graph.setdefault(path.stem, set()).add(parts[1])
    return graph


def test_no_import_cycle_between_the_plugins_modules() -> None:
    cycle = find_cycle(_plugin_graph())
    assert cycle is None, f"the plugin's modules import each other in a cycle: {' -> '.join(cycle or [])}"


def test_the_plugin_cycle_check_sees_a_lazy_import_cycle(tmp_path: Path) -> None:
    """The check reads imports inside functions too: the cycle it was written for was one."""
    pkg = tmp_path / "pyspark_safebunny"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from pyspark_safebunny.a import x\n")
    (pkg / "a.py").write_text("from pyspark_safebunny.b import y\n")
    (pkg / "b.py").write_text("def f():\n    from pyspark_safebunny.a import x\n")
    assert find_cycle(_plugin_graph(pkg)) == ["a", "b", "a"]
    (pkg / "b.py").write_text("def f():\n    return 1\n")
    assert find_cycle(_plugin_graph(pkg)) is None
#: the Spark plugin is the source and the sink: the layers above them are not its business
PLUGIN_FORBIDDEN = {"delta", "exactly_once", "saga", "cli", "demo"}


@pytest.mark.parametrize("path", sorted(PLUGIN.rglob("*.py")), ids=lambda p: p.name)
def test_the_plugin_does_not_import_the_layers_above_the_source_and_sink(path: Path) -> None:
    hits = sorted(n for n in _imports(path) for banned in PLUGIN_FORBIDDEN
                  if n == f"safebunny.{banned}" or n.startswith(f"safebunny.{banned}."))
    assert not hits, f"{path.name} imports {hits}; the plugin may use the source, sink and option layers only"


def test_every_test_module_has_a_name_of_its_own() -> None:
    """The test folders are not packages, so pytest imports each module by its file name: two modules of one name
    in two folders stop the whole run at collection."""
    tests = Path(__file__).resolve().parents[1]
    names: dict[str, list[str]] = {}
    for path in tests.rglob("test_*.py"):
        names.setdefault(path.name, []).append(str(path.relative_to(tests)))
    assert {name: paths for name, paths in names.items() if len(paths) > 1} == {}


# -- docstrings say what and why; measured figures live in docs/performance.md ----------------------------
#: a measured figure: "measured", a rate, a time in ms or µs, "N s per/each/after", a ratio like "0.76x", a p90
FIGURE = re.compile(r"(?i)\bmeasured\b|\bmsg/s\b|messages/s\b|\d (ms|µs)\b|\d(\.\d+)? s (per|each|after|on)\b"
                    r"|\d(\.\d+)?x\b|\bp\d\d\b")
#: docstrings that name a unit, not a figure
FIGURE_ALLOWED = {("python/safebunny/demo/monitor.py", "Monitor"), ("python/safebunny/demo/monitor.py", "write_chart")}


def _figures(path: Path, rel: str) -> list[str]:
    hits = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node) or ""
            where = getattr(node, "name", "<module>")
            if (rel, where) in FIGURE_ALLOWED:
                continue
            hits += [f"{rel} {where}: {m.group(0)!r} in {line.strip()[:90]!r}"
                     for line in doc.splitlines() for m in [FIGURE.search(line)] if m]
    return hits


def test_no_docstring_holds_a_measured_figure() -> None:
    hits = [h for folder in ("python", "connector") for p in sorted((REPO / folder).rglob("*.py"))
            for h in _figures(p, str(p.relative_to(REPO)))]
    assert not hits, "benchmark figures belong in docs/performance.md, not in docstrings:\n" + "\n".join(hits)


def test_the_figure_check_finds_a_figure(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text('"""Fast: measured here, 2,143 msg/s."""\n\ndef f():\n    """Opening one costs 5-25 ms."""\n')
    assert len(_figures(module, "m.py")) == 2
    module.write_text('"""Reads the queue; a delay like ``"250ms"`` is parsed by :func:`f`."""\n')
    assert _figures(module, "m.py") == []


def test_the_module_map_in_design_md_is_current() -> None:
    """docs/design.md's module map has one line per module, as ``tools/module_map.py`` prints it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("module_map", REPO / "tools" / "module_map.py")
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    design = (REPO / "docs" / "design.md").read_text(encoding="utf-8")
    section = design.split("## Module map", 1)[1].split("\n### ", 1)[1]
    assert "### " + section.strip() == tool.module_map(REPO).strip(), (
        "docs/design.md's module map is stale: run `python tools/module_map.py` and paste its output under "
        "'## Module map'")


def test_importing_the_plugin_loads_neither_the_saga_config_nor_arrow() -> None:
    """Spark imports the plugin in every Python worker that unpickles a reader or writer: it stays light (the
    saga's queue names need no settings, the steps, storage or pyarrow)."""
    import subprocess
    import sys

    code = ("import sys, pyspark_safebunny; "
            "print(sorted(m for m in ('pyarrow', 'numpy', 'safebunny.saga.define.config', 'safebunny.exactly_once', "
            "'safebunny.storage') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", f"importing the plugin loaded {out.strip()}"


def _module_graph() -> dict[str, set[str]]:
    """Which of the core's modules import which, type-checking imports included (a package's ``__init__`` only
    re-exports, lazily, and is left out)."""
    modules = {".".join(p.relative_to(CORE.parent).with_suffix("").parts): p for p in _modules()
               if p.name != "__init__.py"}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        for imported in _imports(path):
            while imported and imported not in modules:
                imported = imported.rpartition(".")[0]
            if imported and imported != name:
                graph.setdefault(name, set()).add(imported)
    return graph


def test_no_import_cycle_between_modules() -> None:
    """No two modules import each other, even through a third (an interface imports none of its implementations;
    the saga's naming rules sit in a module of their own, under its config, steps and topology)."""
    cycle = find_cycle(_module_graph())
    assert cycle is None, f"modules import each other in a cycle: {' -> '.join(cycle or [])}"


def test_one_lease_type_with_one_liveness_rule() -> None:
    """Whether a lease's holder lives is decided in one place, ``storage/lease.py``'s ``Lease.live``, and that
    ``Lease`` is the one lease type: a second class named for a lease, or a second record with a ``renewed`` time,
    anywhere in the package fails (a user of leases puts what it needs in the lease's payload)."""
    rules, types = [], []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Attribute) and node.attr == "renewed_within"
                    and path.relative_to(CORE) != Path("storage/lease.py")):
                rules.append(f"{path.relative_to(CORE)}: a call of renewed_within")
            if not isinstance(node, ast.ClassDef):
                continue
            methods = {f.name for f in node.body if isinstance(f, ast.FunctionDef)}
            fields = {f.target.id for f in node.body if isinstance(f, ast.AnnAssign) and isinstance(f.target, ast.Name)}
            where = f"{path.relative_to(CORE)}:{node.name}"
            if methods & {"live", "alive", "renewed_within", "expired"}:
                rules.append(where)
            if node.name.endswith("Lease") or "renewed" in fields:
                types.append(where)
    assert rules == ["storage/lease.py:Lease"], f"lease liveness rules outside storage/lease.py: {rules}"
    assert types == ["storage/lease.py:Lease"], f"lease types besides storage.lease.Lease: {types}"


#: a module of ``cli/`` or ``demo/`` is named for the command it runs (``cli/status.py`` runs ``safebunny status``,
#: over ``saga/look/status.py``), so those two folders are left out of the name check below
NAMED_FOR_COMMANDS = {"cli", "demo"}
#: names still shared, each with the reason: the connection options' module is reshaped by the typed settings work
SHARED_NAMES = {"connection.py"}  # amqp/connection.py (opening connections), options/connection.py (their options)


def test_no_two_modules_share_a_file_name() -> None:
    """Each file name says its role (``amqp/frame_decode.py``, ``handlers/frame_handler.py``), so a name found in a
    traceback or a grep points at one module."""
    seen: dict[str, list[str]] = {}
    for path in _modules():
        rel = path.relative_to(CORE)
        if path.name in ("__init__.py", "__main__.py") or rel.parts[0] in NAMED_FOR_COMMANDS:
            continue
        seen.setdefault(path.name, []).append(str(rel))
    twice = {name: where for name, where in seen.items() if len(where) > 1 and name not in SHARED_NAMES}
    assert not twice, f"file names used by more than one module (name each for its role): {twice}"


def test_the_spark_edge_is_one_room() -> None:
    """Code that needs Spark, the JVM or the plugin sits in ``spark/`` (or in the layers that run Spark work: the
    steps, the saga, the command line): no top-level module imports it, and none is named for it."""
    for path in sorted(CORE.glob("*.py")):
        if path.name in ("__init__.py", "__main__.py"):
            continue  # safebunny.register(spark) hands Spark the plugin; __main__ runs the command line
        spark = sorted(n for n in _imports(path) if n.split(".")[0] in ("pyspark", "py4j", "pyspark_safebunny"))
        assert not spark, f"{path.name} imports {spark}: it belongs in safebunny/spark/"
        assert not path.stem.startswith("spark"), f"{path.name} is named for Spark: it belongs in safebunny/spark/"


#: saga/'s rooms by job, each may import only the rooms before it; the facade (saga/saga.py) sits above them all
SAGA_ROOMS = ("define", "run", "look")


@pytest.mark.parametrize("path", sorted((CORE / "saga").rglob("*.py")), ids=lambda p: str(p.relative_to(CORE)))
def test_the_saga_rooms_point_one_way(path: Path) -> None:
    """define/ (a saga's steps, graph, topology, settings) knows nothing of running or looking; run/ (queries, drain,
    failures, leases) nothing of looking; look/ (status, trace, the page) reads what the others write; none of them
    imports the ``Saga`` facade, which holds them together."""
    rel = path.relative_to(CORE / "saga")
    if len(rel.parts) < 2:
        assert rel.name in ("__init__.py", "saga.py"), f"saga/{rel} is loose: put it in one of {SAGA_ROOMS}"
        return
    room = rel.parts[0]
    assert room in SAGA_ROOMS, f"saga/{rel}: {room} is not one of the saga's rooms {SAGA_ROOMS}"
    later = SAGA_ROOMS[SAGA_ROOMS.index(room) + 1:]
    for name in _imports(path):
        parts = name.split(".")
        if parts[:2] != ["safebunny", "saga"] or len(parts) < 3:
            continue
        assert parts[2] not in later, f"saga/{rel} imports {name}: {room}/ must not depend on {parts[2]}/"
        assert parts[2] != "saga", f"saga/{rel} imports the Saga facade ({name}): pass what it needs instead"


#: what ``exactly_once`` may import of ``delta``: the interface and the one place a backend is chosen, and the pure
#: rule a merge's rows follow (no backend behind it)
DELTA_DOORS = {"safebunny.delta", "safebunny.delta.target", "safebunny.delta.backend", "safebunny.delta.merge_rows"}


@pytest.mark.parametrize("path", sorted((CORE / "exactly_once").rglob("*.py")), ids=lambda p: str(p.relative_to(CORE)))
def test_exactly_once_reaches_delta_only_through_its_interface(path: Path) -> None:
    """A step reaches Delta through ``delta.target`` (the lookups it needs are on ``DeltaTarget``) and
    ``delta.backend`` (which picks the backend), never a backend itself, and never asks which backend it got."""
    hits = sorted(n for n in _imports(path) if n.startswith("safebunny.delta") and
                  not any(n == door or n.startswith(f"{door}.") and door != "safebunny.delta" for door in DELTA_DOORS))
    assert not hits, f"{path.relative_to(CORE)} imports {hits}: use safebunny.delta.target / delta.backend"
    source = path.read_text(encoding="utf-8")
    assert not re.search(r"backend\s*==|==\s*[\"']spark[\"']", source), (
        f"{path.relative_to(CORE)} switches on the Delta backend: put the difference behind DeltaTarget")


#: the modules outside ``spark/`` (and the plugin) that import PySpark, and why: each one's job is a DataFrame or a
#: Spark type, so it cannot be asked of spark/
PYSPARK_OUTSIDE_SPARK = {
    "delta/spark_delta.py": "the Spark Delta backend: reads and writes tables by name through DataFrames",
    "delta/spark_inbox.py": "an inbox's look-ups on Spark Delta filter and join the table's DataFrame",
    "exactly_once/collect/materialize.py": "builds the handler's DataFrame and Spark schema from a batch's rows",
    "exactly_once/collect/journal_read.py": "reads a batch's journal as the query's DataFrame beside the step",
    "exactly_once/handlers/frame_handler.py": "runs a DataFrame handler, whose failures are Spark's exceptions",
    "saga/define/bodies.py": "parses message bodies with a step's Spark schema (Spark types)",
    "saga/look/instances.py": "the saga's instances as a DataFrame and SQL view",
    "saga/look/metrics.py": "a StreamingQueryListener that counts the steps' batches",
    "demo/main.py": "the demo starts its own local SparkSession",
    "demo/monitor.py": "the demo's progress bar is a StreamingQueryListener",
    "demo/fulfilment.py": "the demo's handlers are DataFrame code",
}


def _imports_pyspark(path: Path) -> bool:
    return any(n.split(".")[0] in ("pyspark", "py4j") for n in _imports(path))


def test_pyspark_is_imported_in_spark_and_the_listed_dataframe_modules_only() -> None:
    importers = {str(p.relative_to(CORE)) for p in _modules()
                 if p.relative_to(CORE).parts[0] != "spark" and _imports_pyspark(p)}
    assert importers <= set(PYSPARK_OUTSIDE_SPARK), (
        f"{sorted(importers - set(PYSPARK_OUTSIDE_SPARK))} import PySpark: move the Spark part into safebunny/spark/ "
        "(or, if the module's job is a DataFrame, list it here with the reason)")
    assert importers == set(PYSPARK_OUTSIDE_SPARK), f"listed but no longer importing PySpark: " \
        f"{sorted(set(PYSPARK_OUTSIDE_SPARK) - importers)}"


def test_the_delta_boundary_check_finds_a_backend_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("from safebunny.delta.spark_delta import SparkDeltaTarget\nimport pyspark.sql\n")
    assert "safebunny.delta.spark_delta" in _imports(module) and _imports_pyspark(module)
