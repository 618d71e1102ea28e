"""Sagas as chained streaming queries: saga definition, retry tiers, breaker, runner, status and trace."""

__all__: list[str] = []
