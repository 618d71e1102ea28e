"""A step's emits: :mod:`.routed_rows` (publish rows with derived ids, routed), :mod:`.retrying_publisher`
(published with confirms, retried with the same ids) and :mod:`.executor_publish` (a large batch's, from the
executors)."""

__all__: list[str] = []
