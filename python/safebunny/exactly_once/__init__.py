"""Exactly-once steps: the Delta inbox, idempotent Delta effects, step outcomes, retention."""

__all__: list[str] = []
