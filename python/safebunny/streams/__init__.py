"""Stream queues read by offset: :mod:`.stream_source` (the source's driver side without Spark: bounds,
read limits, anchors, the kept driver connection, reading a range), :mod:`.client` (stream protocol and the
AMQP 0-9-1 fallback), :mod:`.offsets` (pure offset arithmetic: bounds, ranges, data-loss checks) and
:mod:`.probe` (which kind of queue a name is: stream, quorum or classic, asked over the stream protocol,
then AMQP 0-9-1)."""

__all__: list[str] = []
