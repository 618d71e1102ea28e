"""A step's durable records: :mod:`.table` (the inbox, with :mod:`.index`) and :mod:`.decisions` (a batch's
recorded row decisions, and the committed ones)."""

__all__: list[str] = []
