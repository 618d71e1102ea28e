"""An output DataFrame that only selects columns of another output, read from that one's rows.

A handler often writes a DataFrame as an effect and emits some of its columns (``rows`` as the effect,
``rows.select("messageId", "orderId")`` as the emit). Collected separately, that is two Spark jobs over the
same input; :func:`column_projection` recognises the second as a plain column selection of the first (its
analyzed plan a ``Project`` of attributes over a plan with the same result), so the step collects the first
once and takes the columns from its Arrow table. Spark classic only (the plan is reached through the JVM);
anything else, or any surprise from the plan API, returns ``None`` and the frame is collected as usual.
"""

from __future__ import annotations

from typing import Any

__all__ = ["column_projection"]


def column_projection(frame: Any, base: Any) -> list[str] | None:
    """The names of ``base``'s columns that ``frame`` selects, in ``frame``'s order, when ``frame`` is exactly
    ``base.select(<some of its columns>)``; ``None`` otherwise."""
    jdf, jbase = getattr(frame, "_jdf", None), getattr(base, "_jdf", None)
    if jdf is None or jbase is None or frame is base:
        return None
    base_columns = list(base.columns)
    if len(set(base_columns)) != len(base_columns):
        return None
    try:
        plan = jdf.queryExecution().analyzed()
        if plan.getClass().getSimpleName() != "Project":
            return None
        if not plan.child().sameResult(jbase.queryExecution().analyzed()):
            return None
        projected = plan.projectList()
        names = []
        for i in range(projected.size()):
            expression = projected.apply(i)
            if expression.getClass().getSimpleName() != "AttributeReference":
                return None  # an alias, a computed column: not a plain selection
            names.append(expression.name())
    except Exception:  # noqa: BLE001 - an unexpected plan API: collecting the frame itself always works
        return None
    if names != list(frame.columns) or not set(names) <= set(base_columns):
        return None
    return names
