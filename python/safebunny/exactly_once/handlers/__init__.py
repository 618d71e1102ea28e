"""Running a step's handler on a batch: :mod:`.frame_handler` (a DataFrame handler, failing rows isolated by
bisecting), :mod:`.frame_record` (its outcome recorded for replays), :mod:`.row_handler` (a row handler, its
decisions recorded and committed) and :mod:`.row_types`."""

__all__: list[str] = []
