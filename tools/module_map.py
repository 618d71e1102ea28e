"""Print docs/design.md's module map: one line per module of the library and the connector, each the first
sentence of the module's docstring.

    python tools/module_map.py > /tmp/map.md   # then paste it under "## Module map" in docs/design.md

``tests/unit/test_layout.py`` checks that the map names every module and no module that is gone.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

__all__ = ["FOLDERS", "module_map", "summary"]

REPO = Path(__file__).resolve().parents[1]
FOLDERS = ("python/safebunny", "connector/pyspark_safebunny")


def summary(path: Path) -> str:
    """The first sentence of the module's docstring (to its first full stop, colon or semicolon)."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    first = " ".join(doc.strip().split("\n\n")[0].split())
    match = re.match(r"(.+?[.:;])(\s|$)", first)
    return (match.group(1) if match else first).rstrip(".:;").replace("|", "\\|")


def module_map(repo: Path = REPO) -> str:
    """The map as markdown: a table per folder, a row per module."""
    out = []
    for base in FOLDERS:
        for folder in sorted({p.parent for p in (repo / base).rglob("*.py")}):
            out += [f"### `{folder.relative_to(repo)}/`", "", "| module | what it holds |", "| --- | --- |"]
            out += [f"| `{p.name}` | {summary(p)} |" for p in sorted(folder.glob("*.py"))]
            out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    print(module_map())
