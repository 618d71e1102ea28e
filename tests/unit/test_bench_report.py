"""The benchmark's pure report logic: medians, ratios to the ceilings, targets, and the tables."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.report import (  # noqa: E402
    CaseResult,
    cpu_table,
    evaluate_targets,
    format_markdown,
    format_text,
    ratio,
    results_to_json,
    table_rows,
)

CONSUME = "raw: pika consume · classic"
RCONSUME = "raw: rstream consume · stream"


def _results() -> list[CaseResult]:
    return [
        CaseResult(CONSUME, "raw", "consume", "classic", 1000, rates=[10_000.0, 12_000.0, 11_000.0]),
        CaseResult("source · classic", "connector", "source", "classic", 1000, rates=[9_000.0], ceiling=CONSUME,
                   batch_ms=[100.0, 200.0, 300.0], memory_mb={"driver_jvm": 500.0, "reader": 150.0, "workers": 300.0},
                   params={"maxMessagesPerTrigger": 10_000}),
        CaseResult("sink · classic", "connector", "sink", "classic", status="not available",
                   reason="pyspark_safebunny.writer is not installed", ceiling="raw: pika publish · classic"),
        CaseResult(RCONSUME, "raw", "consume", "stream", rates=[100_000.0]),
        CaseResult("source · stream · 1 partition", "connector", "source", "stream", rates=[30_000.0], ceiling=RCONSUME,
                   params={"partitions": 1}),
        CaseResult("source · stream · 2", "connector", "source", "stream", rates=[57_000.0], ceiling=RCONSUME,
                   params={"partitions": 2}),
    ]


def test_ratio_is_median_over_median_and_absent_without_both_numbers() -> None:
    results = _results()
    by_name = {r.name: r for r in results}
    assert by_name[CONSUME].rate == 11_000.0
    assert ratio(by_name["source · classic"], by_name) == 9_000.0 / 11_000.0
    assert ratio(by_name["sink · classic"], by_name) is None  # not available: no number, no ratio
    assert ratio(by_name[CONSUME], by_name) is None  # a ceiling has no ceiling


def test_table_shows_unavailable_cases_with_their_reason_and_never_a_number() -> None:
    rows = table_rows(_results())
    assert rows[0][:4] == ["case", "queue", "msg/s", "× ceiling"]
    source = next(r for r in rows if r[0] == "source · classic")
    assert source[2] == "9,000" and source[3] == "0.82" and source[5] == "200 / 298"
    assert source[7] == "500 / 150 / 300"
    sink = next(r for r in rows if r[0] == "sink · classic")
    assert sink[2] == "not available" and "not installed" in sink[7] and sink[3] == "–"


def test_targets_are_judged_or_marked_not_judged() -> None:
    targets = {t.name: t for t in evaluate_targets(_results())}
    assert targets["source vs pika consume"].met is True  # 0.82 ≥ 0.8
    assert targets["sink vs pika confirm window"].met is None  # nothing measured
    assert targets["stream source"].met is True and "57,000" in targets["stream source"].value
    assert targets["stream partitions"].met is True and targets["stream partitions"].value == "1.90×"
    assert targets["reader memory"].met is None


def test_markdown_text_and_json_carry_the_same_cases() -> None:
    results = _results()
    targets = evaluate_targets(results)
    machine = {"started": "2026-01-01 00:00:00 UTC", "cpu": "test"}
    md = format_markdown(results, targets, machine, "make bench", ["a note"])
    assert "| source · classic | classic | 9,000 | 0.82 |" in md and "- a note" in md and "`make bench`" in md
    text = format_text(results, targets)
    assert "[met] source vs pika consume" in text and "[not judged] sink vs pika confirm window" in text
    doc = json.loads(results_to_json(results, targets, machine, "make bench"))
    cases = {c["name"]: c for c in doc["cases"]}
    assert cases["sink · classic"]["rate_median"] is None and cases["sink · classic"]["status"] == "not available"
    assert cases["source · classic"]["batch_ms"] == {"n": 3, "p50": 200.0, "p99": 298.0}


def test_cpu_table_is_microseconds_per_message_and_skips_cases_without_samples() -> None:
    results = _results()
    results[0].cpu_s, results[0].cpu_messages = {"harness": 0.5, "broker": 1.0}, 10_000
    rows = cpu_table(results)
    assert rows[0][0] == "case" and rows[0][-2:] == ["total without broker", "cores busy (all)"]
    # 150 µs per message in all at the median 11,000 msg/s: 1.65 cores
    assert rows[1:] == [[CONSUME, "50", "–", "–", "–", "–", "100", "50", "1.65"]]


def test_a_connector_case_with_fewer_than_five_measured_batches_is_not_measured():
    from bench.report import NOT_MEASURED, CaseResult, mark_unmeasured

    few = CaseResult("connector classic", "connector", "source", "classic", rates=[30_000.0], batch_ms=[900, 200, 210],
                     params={"batches": 3})
    enough = CaseResult("connector quorum", "connector", "source", "quorum", rates=[40_000.0],
                        batch_ms=[900] + [200] * 6, params={"batches": 7})
    raw = CaseResult("raw classic", "raw", "consume", "classic", rates=[50_000.0])
    assert mark_unmeasured([few, enough, raw]) == [few]
    assert few.status == NOT_MEASURED and few.rate is None and "only 2 measured" in few.reason
    assert enough.rate == 40_000.0 and raw.rate == 50_000.0


def test_each_ratio_is_printed_with_its_target_and_verdict() -> None:
    from bench.report import ratio_line, verdict

    assert ratio_line("step / raw stage loop", 0.9514, 1.0) == "step / raw stage loop: 0.951x (target >= 1.0x): not met"
    assert ratio_line("executor publish", 0.9, 0.9) == "executor publish: 0.900x (target >= 0.9x): met"
    assert ratio_line("saga drain", None, 0.3) == "saga drain: – (target >= 0.3x): not judged"
    assert ratio_line("saga drain, 50,000 orders", 0.4, None) == "saga drain, 50,000 orders: 0.400x (no target)"
    assert [verdict(m) for m in (True, False, None)] == ["met", "not met", "not judged"]


def test_one_stream_partition_is_judged_against_raw_rstream_consume() -> None:
    targets = {t.name: t for t in evaluate_targets(_results())}
    one = targets["stream source, 1 partition"]  # 30,000 / 100,000 msg/s
    assert one.met is False and one.value == "source · stream · 1 partition: 0.30×" and "0.85×" in one.goal
    assert "[not met] stream source, 1 partition" in format_text(_results(), evaluate_targets(_results()))


def test_alternating_rounds_rotate_which_case_runs_first_and_print_each_round(capsys) -> None:
    from bench.report import alternating_rounds

    ran: list[tuple[str, int]] = []

    def measure(case: str, index: int) -> float:
        ran.append((case, index))
        return {"raw": 100.0, "a": 50.0, "b": 25.0}[case]

    def summary(got: dict) -> tuple[dict, str]:
        ratio = got["a"] / got["raw"]
        return {"ratio": ratio}, f"ratio {ratio}"

    rounds = alternating_rounds(4, ("raw", "a", "b"), measure, summary, "size 1, round", load=lambda: 1.234)
    assert [r["order"] for r in rounds] == [["raw", "a", "b"], ["a", "b", "raw"], ["b", "raw", "a"],
                                            ["raw", "a", "b"]]
    assert ran[:4] == [("raw", 0), ("a", 0), ("b", 0), ("a", 1)]
    assert rounds[0] == {"order": ["raw", "a", "b"], "ratio": 0.5, "load_1m": 1.23}
    assert capsys.readouterr().out.splitlines()[1] == "size 1, round 2 (a, b, raw): ratio 0.5; load 1.23"
