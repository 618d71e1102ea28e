"""A step's emits: :mod:`.rows` (publish rows with derived ids, routed), :mod:`.publisher` (published with
confirms, retried with the same ids) and :mod:`.executor_publish` (a large batch's, from the executors)."""

__all__: list[str] = []
