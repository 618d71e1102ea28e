"""How a saga is defined: its steps and their graph, topology and names on the broker, retry tiers, settings, body
parsing. Imports nothing of run/ or look/ or the Saga facade."""

__all__: list[str] = []
