"""Delta tables written exactly once: :mod:`.target` (the interface), :mod:`.backend` (the one place a table's
backend is chosen), :mod:`.delta_rs` (by path, fenceable), :mod:`.spark_delta` (by name, with its commits in
:mod:`.spark_commits`, its creates in :mod:`.spark_create`, its SQL in :mod:`.spark_sql` and an inbox's look-ups in
:mod:`.spark_inbox`), :mod:`.merge_rows` (one source row per merge key, on both). It depends on
:mod:`safebunny.storage` and :mod:`safebunny.errors` only."""

__all__: list[str] = []
