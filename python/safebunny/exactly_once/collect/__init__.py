"""Collecting to the driver: :mod:`.batch` (the micro-batch, once, deduplicated) and :mod:`.materialize` (a
handler's outputs as Arrow, small ones and column selections without a job of their own; settled)."""

__all__: list[str] = []
