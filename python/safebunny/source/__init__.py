"""The classic and quorum queue source without Spark: what ``pyspark_safebunny.queue_reader`` drives.

- :mod:`~safebunny.source.consumer`: the consumer on its own I/O thread (reconnects, byte-budget flow
  control, acks on commit), with :mod:`~safebunny.source.delivery` (one taken message),
  :mod:`~safebunny.source.take_policy` (when a take waits, pure) and :mod:`~safebunny.source.consumer_budget`
  (byte-budget flow control: prefetch and room to grow);
- :mod:`~safebunny.source.offset`: the source's offset in Spark's offset log, typed;
- :mod:`~safebunny.source.rows`: deliveries to the source's Arrow rows, and journaled rows back;
- :mod:`~safebunny.source.admission`, :mod:`~safebunny.source.available_now`,
  :mod:`~safebunny.source.ack_budget`: whether a poll takes a batch and how long it waits, when an
  availableNow run may end, and when acks lost to the broker's ``consumer_timeout`` must fail the query;
- :mod:`~safebunny.source.journal`: each batch's messages on durable storage before its offset goes to Spark,
  and :mod:`~safebunny.source.journal_owner`: one query per journal location (its owner file is a lease,
  :mod:`safebunny.storage.lease`).

The pause control file is :mod:`safebunny.storage.pause`, beside the rest of the storage layer.
"""

__all__: list[str] = []
