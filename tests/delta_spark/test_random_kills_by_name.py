"""Random SIGKILLs of a step's driver while messages flow, its inbox and effect table given by name (Delta Spark, a
Hive catalog in Derby that outlives the driver), the second restart from a new checkpoint (a new epoch): the
equivalent of tests/e2e/test_step_crash.py's random-kill test, with tests/e2e/random_kills.py's loop and
step_crash_driver.py's ``by_name`` step. One driver runs at a time, so they share one Derby metastore."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "e2e"))

import random_kills  # noqa: E402
from step_crash_driver import by_name_database  # noqa: E402

from helpers import queue_totals  # noqa: E402

N, BATCH = 150, 50  # three batches, as in the crash matrix


def test_random_kills_of_a_step_by_name_end_exactly_once(spark, broker, amqp_uri, tmp_path):
    """Two kills at random moments of batches under way, then a run to the end from a new checkpoint: each message
    once in the effect table (the append by name), one distinct published id per message (its deterministic id),
    the queue empty with nothing unacked, and every claim retired."""
    metastore = tmp_path / "metastore"
    table = metastore / "warehouse" / f"{by_name_database(str(tmp_path))}.db" / "effects"

    def effect_ids(_workdir: Path) -> list[str]:
        return [r.messageId for r in spark.read.format("delta").load(str(table)).select("messageId").collect()]

    result = random_kills.run(amqp_uri, N, 2, tmp_path, batch=BATCH, seed=5, totals=lambda q: queue_totals(broker, q),
                              log=print, replace_every=2, effect_ids=effect_ids,
                              env={"SAFEBUNNY_TEST_BY_NAME": "1", "SAFEBUNNY_TEST_METASTORE": str(metastore)})
    assert result["effect_rows"] == N and result["distinct_emitted"] == N
    assert result["kills"] >= 1 and result["checkpoints_replaced"] == (1 if result["kills"] == 2 else 0)
    assert not list((tmp_path / "state" / "_claims").rglob("*.json")), "every claim retired"
