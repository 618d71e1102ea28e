"""Stream queues read by offset: :mod:`.client` (stream protocol and the AMQP 0-9-1 fallback)
and :mod:`.offsets` (pure offset arithmetic: bounds, ranges, data-loss checks)."""

__all__: list[str] = []
