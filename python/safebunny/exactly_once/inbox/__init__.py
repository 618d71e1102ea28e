"""A step's durable records: :mod:`.table` (the inbox, with :mod:`.index`),
:mod:`.decisions` (committed row decisions) and :mod:`.outcome_log` (a batch's recorded row decisions)."""

__all__: list[str] = []
