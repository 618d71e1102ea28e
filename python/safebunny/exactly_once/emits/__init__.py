"""A step's emits: :mod:`.routed_rows` (publish rows with derived ids, routed) and :mod:`.retrying_publisher`
(published with confirms from the driver, or a large batch's from the executors, retried with the same ids)."""

__all__: list[str] = []
