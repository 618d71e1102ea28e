"""How a saga runs: its streaming queries, the drain, failure routing and parkings, republish, leases and shards, batch
reports. May import define/; never look/ or the Saga facade."""

__all__: list[str] = []
