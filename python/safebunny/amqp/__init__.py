"""AMQP 0-9-1 client pieces, usable without Spark.

- :mod:`.connection`: opening connections, translating broker errors;
- :mod:`.consumer`: the manual-ack queue consumer behind the queue source;
- :mod:`.publisher`: the confirming publisher behind the sink;
- :mod:`.message_rows`: deliveries to Arrow columns (the source's row schema);
- :mod:`.outgoing`: rows to outgoing messages (ids, properties, routing) for the sink.
"""

__all__: list[str] = []
