"""Collecting to the driver: :mod:`.batch` (the micro-batch, once, deduplicated), :mod:`.materialize` (a
handler's outputs as Arrow, with :mod:`.local_collect` and :mod:`.derived_frames`) and :mod:`.settle`."""

__all__: list[str] = []
