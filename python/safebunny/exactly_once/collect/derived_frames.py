"""Output DataFrames that only select columns of another output, read from that one's rows.

A handler often writes a DataFrame as an effect and emits some of its columns (``rows`` as the effect,
``rows.select("messageId", "orderId")`` as the emit). Collected separately, that is two Spark jobs over the
same input; :func:`column_selections` recognises the second as a plain column selection of the first (its
analyzed plan a ``Project`` of attributes over a plan with the same result), so the step collects the first
once and takes the columns from its Arrow table. Spark classic only (the plan is reached through the JVM);
anything else, or any surprise from the plan API, leaves the frame to be collected as usual.
"""

from __future__ import annotations

from typing import Any

__all__ = ["column_selections"]


def _selection(frame: Any) -> tuple[Any, list[str]] | None:
    """(the plan ``frame`` selects from, the selected names) when its analyzed plan is a ``Project`` of plain
    attributes; ``None`` otherwise."""
    jdf = getattr(frame, "_jdf", None)
    if jdf is None:
        return None
    try:
        plan = jdf.queryExecution().analyzed()
        if plan.getClass().getSimpleName() != "Project":
            return None
        projected = plan.projectList()
        names = []
        for i in range(projected.size()):
            expression = projected.apply(i)
            if expression.getClass().getSimpleName() != "AttributeReference":
                return None  # an alias, a computed column: not a plain selection
            names.append(expression.name())
        return plan.child(), names
    except Exception:  # noqa: BLE001 - an unexpected plan API: collecting the frame itself always works
        return None


def _selects_from(selection: tuple[Any, list[str]], frame: Any, base: Any) -> bool:
    """Whether ``frame`` (whose ``selection`` it is) is exactly ``base.select(<some of its columns>)``."""
    child, names = selection
    jbase = getattr(base, "_jdf", None)
    if jbase is None or frame is base:
        return False
    base_columns = list(base.columns)
    if len(set(base_columns)) != len(base_columns) or not set(names) <= set(base_columns):
        return False
    try:
        return bool(child.sameResult(jbase.queryExecution().analyzed())) and names == list(frame.columns)
    except Exception:  # noqa: BLE001 - as above
        return False


def column_selections(frames: list[Any]) -> dict[int, tuple[Any, list[str]]]:
    """id(frame) -> (another of ``frames``, the columns it selects of it), for each frame that is a plain column
    selection of another one that is collected itself. Each frame's own plan is read once."""
    if len(frames) < 2:
        return {}
    derived: dict[int, tuple[Any, list[str]]] = {}
    for frame in frames:
        selection = _selection(frame)
        if selection is None:
            continue
        for base in frames:
            if id(base) not in derived and _selects_from(selection, frame, base):
                derived[id(frame)] = (base, selection[1])
                break
    # a base must be collected itself: a frame whose base is derived in turn is collected as usual
    return {key: (base, columns) for key, (base, columns) in derived.items() if id(base) not in derived}
