"""A model of a sharded step's throughput against drivers and shards on a cluster (pure arithmetic).

Each shard of a step is one streaming query with its own queue; a driver runs the queries of the shards
it holds, each query its batches one after another. So a step's throughput is the least of:

- **the shards' serial paths**: a shard moves at most ``batch / (batch_fixed_s + batch * per_msg_s)``
  messages a second (a batch's fixed wall time: planning, the checkpoint, the inbox commit; then the
  per-message part), and a driver holding ``k`` shards at most ``k`` times that;
- **each driver's CPU**: ``driver_cores / (driver_cpu_per_msg_s + driver_cpu_per_batch_s / batch)``
  (what grows with drivers);
- **the broker**: ``broker_msgs_s``, all the step's shard queues together (grows with the broker's
  nodes when the shard queues' leaders are spread over them, not with drivers);
- **the shared inbox**: every batch of every shard ends with one commit to the step's inbox, a Delta
  table whose log takes one commit at a time, so ``batch / inbox_commit_s`` at most (not with drivers).

Assumptions: the shards are balanced over the drivers (the leases give each its share), every shard
queue holds a backlog (the model is of a drain, not of a trickle), executors are not the limit (they
grow with the cluster; a step's per-message work runs there), and the inbox commit's time does not grow
with concurrent writers (optimistic-concurrency retries would make it worse). :func:`fit_line` derives
the per-shard cost from a measurement of one driver with 1, 2, 4, 8 shards (``bench.shard_overhead``).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Limit", "Params", "fit_line", "partition_speedup_bound", "table", "throughput"]


@dataclass(frozen=True)
class Params:
    """What a step costs, per batch and per message; see the module's docstring."""

    batch: int  # messages per batch of one shard
    batch_fixed_s: float  # wall seconds of a batch whatever its size, on one shard's serial path
    per_msg_s: float  # wall seconds per message of a batch, on that path
    driver_cpu_per_batch_s: float  # driver CPU seconds per batch (per shard query)
    driver_cpu_per_msg_s: float  # driver CPU seconds per message
    driver_cores: float  # cores a driver can use
    broker_msgs_s: float  # the broker's ceiling for the step's shard queues together
    inbox_commit_s: float  # seconds the shared inbox's log is held by one batch's commit


@dataclass(frozen=True)
class Limit:
    """The modelled throughput and what limits it (``shards``, ``driver CPU``, ``broker`` or ``inbox``)."""

    msgs_s: float
    by: str


def _split(shards: int, drivers: int) -> list[int]:
    base, extra = divmod(shards, drivers)
    return [base + (1 if i < extra else 0) for i in range(drivers)]


def throughput(drivers: int, shards: int, p: Params) -> Limit:
    """The step's modelled messages per second with ``shards`` shards balanced over ``drivers`` drivers."""
    if drivers < 1 or shards < 1 or p.batch < 1:
        raise ValueError(f"drivers, shards and batch must be at least 1; got {drivers}, {shards}, {p.batch}")
    shard_rate = p.batch / (p.batch_fixed_s + p.batch * p.per_msg_s)
    cpu_rate = p.driver_cores / (p.driver_cpu_per_msg_s + p.driver_cpu_per_batch_s / p.batch)
    per_driver = [(k * shard_rate, "shards") if k * shard_rate <= cpu_rate else (cpu_rate, "driver CPU")
                  for k in _split(shards, drivers) if k]
    drivers_total = sum(rate for rate, _ in per_driver)
    drivers_by = "shards" if all(by == "shards" for _, by in per_driver) else "driver CPU"
    candidates = [(drivers_total, drivers_by), (p.broker_msgs_s, "broker"), (p.batch / p.inbox_commit_s, "inbox")]
    rate, by = min(candidates, key=lambda c: c[0])
    return Limit(rate, by)


def table(p: Params, drivers: tuple[int, ...] = (1, 2, 4, 8), shards: tuple[int, ...] = (1, 2, 4, 8, 16)) -> str:
    """A Markdown table of :func:`throughput`: one row per driver count, one column per shard count."""
    rows = ["| drivers \\ shards | " + " | ".join(str(s) for s in shards) + " |",
            "| --- |" + " ---: |" * len(shards)]
    for d in drivers:
        cells = []
        for s in shards:
            if s < d:
                cells.append("–")  # a driver without a shard adds nothing
                continue
            lim = throughput(d, s, p)
            cells.append(f"{lim.msgs_s:,.0f} ({lim.by})")
        rows.append(f"| {d} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def fit_line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares ``(intercept, slope)`` of ``ys`` against ``xs`` (at least two distinct xs)."""
    if len(xs) != len(ys) or len(set(xs)) < 2:
        raise ValueError(f"need at least two distinct x values with one y each; got xs={xs}, ys={ys}")
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    return my - slope * mx, slope


def partition_speedup_bound(worker_us: float, other_us: float, cores: float = 2.0, partitions: int = 2) -> float:
    """The most ``partitions`` partitions of the stream source can gain over one, when CPU is all there is.

    One partition is one Python worker reading and decoding on one core: at most ``1 / worker_us`` messages
    a microsecond. ``partitions`` workers could do ``partitions`` times that, but every message also costs
    ``other_us`` elsewhere (the driver JVM's copy into Spark rows, the broker), and all of it shares ``cores``:
    at most ``cores / (worker_us + other_us)``. The bound is the ratio of the two rates (CPU per message from
    the CPU table of ``bench.run``)."""
    if worker_us <= 0 or other_us < 0 or cores <= 0 or partitions < 1:
        raise ValueError(f"need worker_us > 0, other_us >= 0, cores > 0, partitions >= 1; got {worker_us}, "
                         f"{other_us}, {cores}, {partitions}")
    machine = cores / (worker_us + other_us)
    return min(partitions / worker_us, machine) / min(1 / worker_us, machine)
