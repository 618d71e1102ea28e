"""Collecting to the driver: :mod:`.batch` (the micro-batch, once, deduplicated), :mod:`.materialize` (a
handler's outputs as Arrow, with :mod:`.local_collect`, outputs read without a job of their own) and :mod:`.settle`."""

__all__: list[str] = []
