"""How a saga is looked at: status, instances, trace, metrics, the parked list and the saga page. May import define/
and run/; never the Saga facade."""

__all__: list[str] = []
