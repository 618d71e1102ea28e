"""The pure parts of the scale-out benches: the broker's ceiling target, consumer shares, the per-shard
summary and the drivers-by-shards model."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.raw_multi import best_of, shares  # noqa: E402
from bench.report import CaseResult, broker_ceiling_target  # noqa: E402
from bench.scale_model import Params, fit_line, partition_speedup_bound, table, throughput  # noqa: E402
from bench.shard_overhead import summarise  # noqa: E402


def test_shares_split_evenly_and_sum_to_n() -> None:
    assert shares(10, 4) == [3, 3, 2, 2]
    assert shares(8, 1) == [8]
    assert sum(shares(200_001, 4)) == 200_001
    with pytest.raises(ValueError, match="at least 1"):
        shares(10, 0)


def test_best_of_picks_the_fastest_measured_count() -> None:
    assert best_of({1: 50_000.0, 2: 80_000.0, 4: 70_000.0}) == (2, 80_000.0)
    assert best_of({1: None, 2: None}) is None


def _ceiling(k: int, rate: float) -> CaseResult:
    return CaseResult(f"raw: pika consume, {k} process(es) · quorum", "raw", "consume", "quorum", rates=[rate],
                      params={"consumers": k})


def test_broker_ceiling_target_divides_the_best_source_by_the_best_ceiling() -> None:
    results = [_ceiling(1, 60_000.0), _ceiling(2, 100_000.0), _ceiling(4, 90_000.0),
               CaseResult("source · quorum · 10k", "connector", "source", "quorum", rates=[50_000.0]),
               CaseResult("source · quorum · default", "connector", "source", "quorum", rates=[85_000.0]),
               CaseResult("source · classic", "connector", "source", "classic", rates=[200_000.0])]
    target = broker_ceiling_target(results)
    assert target.met is True  # 85k / 100k = 0.85
    assert "0.85×" in target.value and "2 process(es)" in target.value and "4: 90,000" in target.value
    assert broker_ceiling_target(results[:3]).met is None  # no source case
    results[4].rates = [70_000.0]
    assert broker_ceiling_target(results).met is False


def test_summarise_gives_ratios_and_the_per_shard_fit() -> None:
    cases = [{"shards": s, "msg_per_s": 1000.0 / s, "driver_cpu_s": 10.0 + 2.0 * s} for s in (1, 2, 4, 8)]
    out = summarise(cases, raw_msgs_s=50_000.0)
    assert out["cases"][0]["ratio_to_raw"] == 0.02 and out["cases"][3]["ratio_to_one_shard"] == 0.125
    assert out["driver_cpu_fit"] == {"cpu_s_at_zero_shards": 10.0, "cpu_s_per_added_shard": 2.0}


def test_fit_line_needs_two_distinct_points() -> None:
    assert fit_line([1.0, 2.0, 3.0], [3.0, 5.0, 7.0]) == pytest.approx((1.0, 2.0))
    with pytest.raises(ValueError, match="two distinct"):
        fit_line([1.0, 1.0], [2.0, 3.0])


P = Params(batch=1000, batch_fixed_s=0.5, per_msg_s=0.0005, driver_cpu_per_batch_s=0.2, driver_cpu_per_msg_s=0.00002,
           driver_cores=4, broker_msgs_s=50_000.0, inbox_commit_s=0.05)


def test_throughput_is_the_least_of_shards_driver_cpu_broker_and_inbox() -> None:
    # one shard: 1000 / (0.5 + 0.5) = 1,000 msg/s on its serial path
    assert throughput(1, 1, P).msgs_s == pytest.approx(1000.0) and throughput(1, 1, P).by == "shards"
    # a driver's CPU: 4 / (0.00002 + 0.0002) = 18,182 msg/s; 32 shards on one driver hit it
    one = throughput(1, 32, P)
    assert one.by == "driver CPU" and one.msgs_s == pytest.approx(4 / 0.00022)
    # more drivers share the shards: 16 shards on 4 drivers = 16,000 msg/s (4 each, below each CPU limit)
    assert throughput(4, 16, P).msgs_s == pytest.approx(16_000.0) and throughput(4, 16, P).by == "shards"
    # 32 shards on 4 drivers would move 32,000, but the inbox takes 1000 / 0.05 = 20,000
    assert throughput(4, 32, P).by == "inbox"
    # the inbox: 1000 / 0.05 = 20,000 msg/s, whatever the drivers
    assert throughput(8, 64, Params(**{**P.__dict__, "broker_msgs_s": 1e9})).by == "inbox"
    assert throughput(8, 64, Params(**{**P.__dict__, "inbox_commit_s": 0.001})).by == "broker"
    with pytest.raises(ValueError, match="at least 1"):
        throughput(0, 1, P)


def test_table_has_a_row_per_driver_count_and_skips_idle_drivers() -> None:
    text = table(P, drivers=(1, 2), shards=(1, 2))
    lines = text.splitlines()
    assert lines[0] == "| drivers \\ shards | 1 | 2 |"
    assert lines[2].startswith("| 1 | 1,000 (shards) | 2,000 (shards)")
    assert lines[3] == "| 2 | – | 2,000 (shards) |"


def test_partition_speedup_bound_is_the_cores_over_the_per_message_cpu() -> None:
    # a worker at 8 µs and 4 µs elsewhere: one partition 125k/s, two at most 2 / 12 µs = 167k/s: 1.33x
    assert partition_speedup_bound(8.0, 4.0) == pytest.approx(4 / 3)
    assert partition_speedup_bound(8.0, 0.0) == pytest.approx(2.0)  # nothing else: the cores double it
    assert partition_speedup_bound(8.0, 4.0, cores=4.0) == pytest.approx(2.0)  # enough cores
    # 1.7x on 2 cores needs everything else under 0.18x the worker's CPU per message
    assert partition_speedup_bound(10.0, 1.7) == pytest.approx(2 * 10 / 11.7)
    with pytest.raises(ValueError, match="worker_us > 0"):
        partition_speedup_bound(0.0, 1.0)
