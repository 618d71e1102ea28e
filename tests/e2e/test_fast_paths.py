"""The small-batch roads a step takes to save Spark jobs give what the general road gives (real
SparkSession, real Delta tables):

- a saga step's bodies parsed on the driver (``saga.bodies``) against Spark's ``from_json`` of the same
  bodies: same columns, same values, dates, timestamps, decimals and maps included;
- a handler's output read from a local relation without a job (``exactly_once.collect.materialize``) against
  ``toArrow``: the same Arrow table, and no Spark job run;
- an output that only selects columns of another output (``exactly_once.collect.materialize`` too) is read from that
  one's rows: the same Arrow table as its own ``toArrow``, one job for both;
- a Delta table handle kept between calls (``delta.delta_rs``) sees every commit, and a table
  deleted and created again at the same path.
"""

from __future__ import annotations

import datetime as dt
import shutil
from decimal import Decimal

import orjson
import pyarrow as pa
import pytest
from pyspark.sql import functions as F  # noqa: N812
from pyspark.sql import types as T  # noqa: N812

from safebunny.delta.delta_rs import DeltaRsTarget
from safebunny.exactly_once.collect.materialize import _collect_all, collect_local, column_selections
from safebunny.saga.define.definition import SagaStep

SOURCE = T.StructType([T.StructField("messageId", T.StringType()), T.StructField("correlationId", T.StringType()),
                       T.StructField("type", T.StringType()), T.StructField("value", T.BinaryType())])


def _jobs(spark) -> int:  # type: ignore[no-untyped-def]
    return len(spark.sparkContext.statusTracker().getJobIdsForGroup(None))


def _source_rows(bodies: list[object]) -> pa.Table:
    n = len(bodies)
    return pa.table({"messageId": [f"m{i}" for i in range(n)], "correlationId": [f"c{i}" for i in range(n)],
                     "type": ["T"] * n, "value": pa.array([orjson.dumps(b) for b in bodies], pa.binary())})


def test_bodies_parsed_on_the_driver_match_spark_s_parse(spark) -> None:  # type: ignore[no-untyped-def]
    step = SagaStep("n", "T", "src", "orderId bigint, amount double, qty int, ok boolean, note string, "
                    "tags array<string>, who struct<name: string, age: int>, type string, day date, "
                    "at timestamp, local timestamp_ntz, cost decimal(10,2), m map<string,int>, raw binary",
                    lambda df, ctx: None)
    bodies = [
        {"orderId": 1, "amount": 2.5, "qty": 3, "ok": True, "note": "a", "tags": ["x", "y"],
         "who": {"name": "ann", "age": 40}, "type": "gift", "unknown": [1], "day": "2026-11-24",
         "at": "2026-11-24T10:00:00Z", "local": "2026-11-24T10:00:00", "cost": 12.34, "m": {"k": 1},
         "raw": "AAE="},
        {"orderId": 2, "amount": 3, "qty": None, "ok": False, "at": "2026-11-24T10:00:00",  # the session's zone
         "at_offset": "x", "cost": 7, "m": {}},
        {"orderId": 6, "tags": [], "who": {}, "at": "2026-11-24T10:00:00.123456+02:00"},
        {"orderId": "7"},                                                     # a string for a bigint: rejected
    ]
    table = _source_rows(bodies)
    prepared = step.body.prepare(table, SOURCE)
    assert set(prepared.rejected) == {"m3"}
    driver = spark.createDataFrame(prepared.table, schema=prepared.schema).where("messageId != 'm3'")
    source = spark.createDataFrame(table, schema=SOURCE).where("messageId != 'm3'")
    parsed = source.select("messageId", "correlationId", "value",
                           F.from_json(F.col("value").cast("string"), step.body.struct).alias("b")).select(
        "messageId", "correlationId", "value", "b.*")
    assert driver.schema == parsed.schema
    assert sorted(driver.collect()) == sorted(parsed.collect())


def test_local_outputs_are_read_without_a_job_and_equal_to_arrow(spark) -> None:  # type: ignore[no-untyped-def]
    rows = pa.table({
        "messageId": ["m1", "m2", "m3"],
        "qty": pa.array([1, None, -7], pa.int32()),
        "amount": [1.5, 2.25, None],
        "ratio": pa.array([0.1, None, 3.0], pa.float32()),
        "flag": [True, False, None],
        "day": pa.array([dt.date(2026, 11, 24), None, dt.date(1970, 1, 1)], pa.date32()),
        "price": pa.array([Decimal("1.10"), Decimal("-3.05"), None], pa.decimal128(10, 2)),
        "blob": pa.array([b"\x00\x01", None, b""], pa.binary()),
        "tags": [["a"], [], None],
        "who": [{"name": "x", "age": 1}, None, {"name": None, "age": 3}],
    })
    source = spark.createDataFrame(rows)
    out = source.where(F.col("messageId") != "m9").select(
        "messageId", (F.col("qty") * 2).alias("qty2"), "amount", "ratio", "flag", "day", "price", "blob", "tags",
        "who", F.upper("messageId").alias("upper"))
    before = _jobs(spark)
    local = collect_local(out)
    assert _jobs(spark) == before, "reading a local relation ran a Spark job"
    assert local is not None
    expected = out.toArrow()
    assert local.schema == expected.schema
    assert local.equals(expected)


def test_plans_that_are_not_local_or_not_exact_take_the_arrow_road(spark) -> None:  # type: ignore[no-untyped-def]
    source = spark.createDataFrame(pa.table({"messageId": ["m1", "m2"], "k": ["a", "a"]}))
    assert collect_local(source.groupBy("k").count()) is None                      # an aggregate: a job
    assert collect_local(source.join(source, "messageId")) is None                   # a join: a job
    assert collect_local(source.select("messageId", F.current_timestamp().alias("at"))) is None  # a timestamp
    assert collect_local(spark.range(3).withColumn("messageId", F.col("id").cast("string"))) is None


def test_a_kept_table_handle_sees_new_commits_and_a_recreated_table(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = str(tmp_path / "t")
    delta = DeltaRsTarget(path)
    assert delta.handle() is None
    delta.append(pa.table({"messageId": ["a"]}), "app", 1)
    assert delta.handle().version() == 1  # 0: the table created empty (a create never carries an app id)
    DeltaRsTarget(path).append(pa.table({"messageId": ["b"]}), "app", 2)          # another writer, the same path
    assert delta.handle().version() == 2 and delta.versions({"app": 2})["app"] == 2
    assert sorted(delta.read().column("messageId").to_pylist()) == ["a", "b"]
    assert not delta.append(pa.table({"messageId": ["b"]}), "app", 2)         # the replay is still refused
    kept = delta.handle()
    for n in range(3):                                 # kept, not loaded again, through commits of other writers
        DeltaRsTarget(path).append(pa.table({"messageId": [f"x{n}"]}), "app", 3 + n)
        assert delta.handle() is kept and kept.version() == 3 + n

    shutil.rmtree(path)                                                        # deleted, then created again
    assert delta.handle() is None
    DeltaRsTarget(path).append(pa.table({"messageId": ["c"]}), "other", 1)
    assert delta.read().column("messageId").to_pylist() == ["c"]
    assert delta.versions({"app": 2})["app"] is None


@pytest.mark.parametrize("rows", [0, 1])
def test_an_empty_or_single_row_output_is_read_locally(spark, rows: int) -> None:  # type: ignore[no-untyped-def]
    source = spark.createDataFrame(pa.table({"messageId": [f"m{i}" for i in range(rows)], "v": list(range(rows))}),
                                   schema="messageId string, v long")
    local = collect_local(source.select("messageId", (F.col("v") + 1).alias("w")))
    assert local is not None and local.num_rows == rows
    assert local.equals(source.select("messageId", (F.col("v") + 1).alias("w")).toArrow())


def _large(spark):  # type: ignore[no-untyped-def]
    """Rows Spark reads with a job (not a local relation): the handler's input of a large batch."""
    return spark.range(0, 50, 1, 2).select(F.col("id").cast("string").alias("messageId"),
                                           (F.col("id") * 3).alias("orderId"), (F.col("id") / 4).alias("amount"),
                                           F.lit("x").alias("note"))


def column_projection(frame, base):  # type: ignore[no-untyped-def]
    """The names of ``base``'s columns that ``frame`` selects when the step would read it from ``base``'s rows."""
    found = column_selections([base, frame]).get(id(frame))
    return found[1] if found is not None and found[0] is base else None


def test_a_column_selection_of_another_output_is_read_from_its_rows(spark) -> None:  # type: ignore[no-untyped-def]
    rows = _large(spark)
    emit = rows.select("orderId", "messageId")
    assert column_projection(emit, rows) == ["orderId", "messageId"]
    before = _jobs(spark)
    effect_table, emit_table = _collect_all([rows, emit])
    assert _jobs(spark) - before == 1, "one job for the effect and the emit that selects its columns"
    assert effect_table.sort_by("messageId").equals(rows.toArrow().sort_by("messageId"))
    assert emit_table.schema == emit.toArrow().schema
    assert emit_table.sort_by("messageId").equals(emit.toArrow().sort_by("messageId"))


def test_anything_but_a_plain_column_selection_is_collected_itself(spark) -> None:  # type: ignore[no-untyped-def]
    rows = _large(spark)
    assert column_projection(rows.select(F.col("orderId").alias("o"), "messageId"), rows) is None  # renamed
    assert column_projection(rows.select("messageId", (F.col("orderId") + 1).alias("orderId")), rows) is None
    assert column_projection(rows.where("orderId > 3").select("messageId"), rows) is None  # filtered first
    assert column_projection(rows.select("messageId"), _large(spark).where("orderId > 0")) is None  # other rows
    assert column_projection(rows, rows) is None
    chained = rows.select("messageId", "orderId")
    inner = chained.select("messageId")
    tables = _collect_all([rows, chained, inner])
    for frame, table in zip([rows, chained, inner], tables, strict=True):
        assert table.sort_by("messageId").equals(frame.toArrow().sort_by("messageId"))


def test_an_empty_batch_commits_nothing_and_the_next_batch_is_recorded(spark, tmp_path):
    """The tick batch a source runs so that Spark commits the batch before it writes no inbox version; a batch
    with messages after it still commits its marker, and its replay is still known as one."""
    import safebunny

    inbox = str(tmp_path / "inbox")
    step = safebunny.Step("ticks", inbox, safebunny.StepSettings(epoch="e1"))
    seen: list[int] = []

    def handler(data, ctx):  # type: ignore[no-untyped-def]
        seen.append(data.count())
        return safebunny.Outcome()

    rows = [("m1", "c1", "T", b"{}")]
    step.process(spark.createDataFrame(rows, SOURCE), 0, handler)
    version = DeltaRsTarget(inbox).handle().version()
    empty = step.process(spark.createDataFrame([], SOURCE), 1, handler)
    assert (empty.received, empty.replayed) == (0, False)
    assert DeltaRsTarget(inbox).handle().version() == version  # no commit for the tick
    step.process(spark.createDataFrame([("m2", "c2", "T", b"{}")], SOURCE), 2, handler)
    assert DeltaRsTarget(inbox).handle().version() == version + 1
    assert step.process(spark.createDataFrame([("m2", "c2", "T", b"{}")], SOURCE), 2, handler).replayed
    assert seen == [1, 1]  # the handler never saw the empty batch; the replay took the batch's recorded outcome
