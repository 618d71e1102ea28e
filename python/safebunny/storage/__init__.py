"""The storage layer: where safebunny's own state goes, on any filesystem pyarrow opens (a local path,
``file://``, ``s3://``, ``gs://``, ``abfs://``, ``hdfs://``).

- :mod:`.location`: a location (path or URI) to a pyarrow filesystem and path, made absolute on the driver;
- :mod:`.writes`: a file written whole or not at all, and created only when absent;
- :mod:`.records`: one file per record in a folder, listed and read back (journal batches, leases, claims),
  and one record read back (a saga step's batch reports);
- :mod:`.lease`: a lease record (holder, host, pid and start time, renewal time, its user's payload), the rules
  by which its holder lives, and the thread that renews it (the journal owner, a saga's drivers);
- :mod:`.pause`: the pause file a source reads and a circuit breaker writes;
- :mod:`.volumes`: Unity Catalog volumes refused before anything is written.

It depends on nothing else in safebunny but :mod:`safebunny.errors`.
"""

__all__ = ["lease"]
