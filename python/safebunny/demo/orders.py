"""The demo's input: orders, some of them declined at payment, some malformed, some sent twice.

Everything is derived from the order number, so a run is reproducible and the checks know which
order must end where: ``declined(i)`` orders are compensated, malformed ones poisoned, the rest shipped.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["plan_orders"]

SKUS = ("bunny-plush", "carrot-crate", "hay-bale", "burrow-kit", "ear-brush")


def order_id(i: int) -> str:
    """The business key of order ``i``."""
    return f"order-{i:06d}"


@dataclass(frozen=True)
class Plan:
    """What the demo publishes and what each order must become."""

    orders: list[dict]            # well-formed orders (OrderPlaced bodies)
    malformed: list[tuple[str, bytes]]  # (order id, body that does not parse)
    duplicates: list[dict]        # orders published a second time (same ids)
    declined: frozenset[str]      # order ids whose payment is declined

    @property
    def total(self) -> int:
        """Distinct orders, malformed included."""
        return len(self.orders) + len(self.malformed)


def _every(share: float) -> int:
    return 0 if share <= 0 else max(1, round(1 / share))


def plan_orders(n: int, declined_share: float = 0.1, malformed_share: float = 0.02,
                duplicate_share: float = 0.05) -> Plan:
    """``n`` orders: every ``1/declined_share``-th uses a card that is declined, every
    ``1/malformed_share``-th is malformed (a body that is not JSON), and every
    ``1/duplicate_share``-th well-formed one is published twice."""
    if n < 1:
        raise ValueError(f"'orders' must be >= 1, but got {n!r}")
    for name, share in (("declined", declined_share), ("malformed", malformed_share), ("duplicate", duplicate_share)):
        if not 0 <= share < 1:
            raise ValueError(f"'{name}' share must be in [0, 1), but got {share!r}")
    d_every, m_every, dup_every = _every(declined_share), _every(malformed_share), _every(duplicate_share)
    orders, malformed, duplicates, declined = [], [], [], set()
    for i in range(n):
        oid = order_id(i)
        if m_every and i % m_every == m_every - 1:
            malformed.append((oid, f'{{"orderId": "{oid}", "sku": '.encode()))  # cut off: not JSON
            continue
        is_declined = bool(d_every) and i % d_every == d_every // 2
        order = {"orderId": oid, "sku": SKUS[i % len(SKUS)], "qty": 1 + i % 3,
                 "amount": round(5 + (i * 7.31) % 200, 2), "card": "4000-0000-0000-0002" if is_declined
                 else "4242-4242-4242-4242"}
        orders.append(order)
        if is_declined:
            declined.add(oid)
        if dup_every and i % dup_every == 1:
            duplicates.append(order)
    return Plan(orders, malformed, duplicates, frozenset(declined))
