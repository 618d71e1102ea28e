"""Running a step's handler on a batch: :mod:`.frames` (a DataFrame handler, failing rows isolated by
:mod:`.isolate`), :mod:`.rows` (a row handler, its decisions recorded and committed) and :mod:`.row_types`."""

__all__: list[str] = []
