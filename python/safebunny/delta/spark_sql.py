"""The SQL and table names of Spark Delta, as pure functions (tested without Delta).

Table names split, quoted and qualified as the catalog reads them, and the statements a Spark Delta target runs.
A merge's source keeps one row per key (:mod:`.merge_rows`' rule): rows numbered in the order the step settled
them (:data:`ORDER_COLUMN`), :func:`last_per_key_sql` keeps the highest per key.
"""

from __future__ import annotations

from collections.abc import Sequence

from safebunny.delta.target import is_path
from safebunny.errors import SafeBunnyOptionError

__all__ = ["merge_sql", "name_parts", "qualified_name", "last_per_key_sql", "quote_name", "table_ref",
           "maintenance_sql", "ORDER_COLUMN"]

#: The column numbering a merge's source rows in the source's order (dropped before the write).
ORDER_COLUMN = "_safebunnyOrder"


def quote_name(name: str) -> str:
    """``catalog.schema.table`` -> ```catalog`.`schema`.`table``` (backticks inside doubled)."""
    return ".".join(f"`{part.replace('`', '``')}`" for part in name_parts(name))


def name_parts(name: str) -> list[str]:
    """``cat.`a.b`.t`` -> ``["cat", "a.b", "t"]``: a table name's parts, the backticks that quote a part removed
    (a doubled one inside kept as one; one inside an unquoted part is part of it)."""
    parts, part, quoted, i = [], "", False, 0
    while i < len(name):
        char = name[i]
        if char == "`" and quoted and name[i + 1:i + 2] == "`":
            part, i = part + "`", i + 2
            continue
        if char == "`" and (quoted or not part):
            quoted = not quoted
        elif char == "." and not quoted:
            parts.append(part)
            part = ""
        else:
            part += char
        i += 1
    parts.append(part)
    if quoted or not all(p.strip() for p in parts):
        raise SafeBunnyOptionError(f"The table name {name!r} is not a name Spark reads (an empty part or an unclosed "
                                   "backtick): give catalog.schema.table, schema.table or table.", "table")
    return parts


def qualified_name(parts: Sequence[str], catalog: str, database: str) -> str:
    """A table's fully qualified name, as the catalog resolves ``parts`` with the session's current ``catalog`` and
    ``database`` (one part: both added; two: the catalog): lower case, as the Hive metastore and Unity Catalog keep
    names; a part quoted where it needs it. ``db.t`` under ``spark_catalog`` and ``spark_catalog.db.t`` are one."""
    full = [*([catalog] if len(parts) < 3 else []), *([database] if len(parts) < 2 else []), *parts]
    return ".".join(p if p.replace("_", "").isalnum() else f"`{p.replace('`', '``')}`" for p in
                    (part.lower() for part in full))


def table_ref(target: str) -> str:
    """A table name quoted (```cat`.`db`.`inbox```), or a path as ``delta.`/path```."""
    if is_path(target):
        return f"delta.`{target.replace('`', '``')}`"
    return quote_name(target)


def maintenance_sql(ref: str) -> list[str]:
    """Compact, then vacuum with the default retention (after :meth:`SparkDeltaTarget.delete_before`)."""
    return [f"OPTIMIZE {ref}", f"VACUUM {ref}"]


def merge_sql(table: str, source_view: str, on: Sequence[str]) -> str:
    """An upsert of the view ``source_view`` into ``table`` on the ``on`` columns."""
    condition = " AND ".join(f"t.{quote_name(k)} = s.{quote_name(k)}" for k in on)
    return (f"MERGE INTO {quote_name(table)} AS t USING {quote_name(source_view)} AS s ON {condition} "
            "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")


def _column(name: str) -> str:
    return f"`{name.replace('`', '``')}`"


def last_per_key_sql(view: str, on: Sequence[str], columns: Sequence[str], order: str = ORDER_COLUMN) -> str:
    """The ``columns`` of ``view`` with one row per ``on`` key, the highest ``order`` winning; rows with a
    null key all kept (a null matches nothing in the merge: each is inserted)."""
    keys = ", ".join(_column(k) for k in on)
    nulls = " OR ".join(f"{_column(k)} IS NULL" for k in on)
    return (f"SELECT {', '.join(_column(c) for c in columns)} FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY "
            f"{keys} ORDER BY {_column(order)} DESC) AS `_safebunnyRank` FROM {quote_name(view)}) "
            f"WHERE `_safebunnyRank` = 1 OR {nulls}")
