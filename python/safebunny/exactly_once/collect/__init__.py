"""Collecting to the driver: :mod:`.batch` (the micro-batch, once, deduplicated) and :mod:`.materialize` (a
handler's outputs as Arrow, settled; with :mod:`.local_collect`, outputs read without a job of their own)."""

__all__: list[str] = []
