"""safebunny over Spark Connect (Databricks serverless and standard-access compute): steps, sagas, the SQL id
functions and notebook 02, each through a Connect client process against the run's one Connect server."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

CLIENT = Path(__file__).with_name("connect_client.py")


def _client(connect_url, scenario, amqp_uri, workdir):
    done = subprocess.run([sys.executable, str(CLIENT), connect_url, scenario, amqp_uri, str(workdir)],
                          capture_output=True, text=True, timeout=600)
    (Path(workdir) / "client.log").write_text(done.stdout + "\n--- stderr ---\n" + done.stderr)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        errors = [ln for ln in done.stderr.splitlines() if ("Error" in ln or "Exception" in ln or "assert" in ln)
                  and not ln.strip().startswith("at ")]
        pytest.fail(f"connect client {scenario!r} failed (rc {done.returncode}):\n" +
                    "\n".join(errors[:30] or [done.stderr[-4000:]]))
    return json.loads(lines[-1].removeprefix("RESULT "))


def test_a_step_over_connect_applies_and_emits_each_message_once(connect_url, amqp_uri, tmp_path):
    result = _client(connect_url, "step", amqp_uri, tmp_path)
    want = sorted(f"m{i}" for i in range(12))
    assert result["effects"] == want, "each message's effect once, duplicates in and across runs dropped"
    assert len(result["emitted"]) == 12 and len(set(result["emitted"])) == 12, result["emitted"]
    assert result["left"] == 0


def test_a_saga_over_connect_started_twice_drains_exactly_once(connect_url, amqp_uri, tmp_path):
    result = _client(connect_url, "saga", amqp_uri, tmp_path)
    want = sorted(f"o{i}" for i in range(30))
    assert result["reservations"] == want and result["shipments"] == want
    stock = next(s for s in result["status"] if s["node"] == "stock")
    # counters come from the reports the server-side steps stored under the saga's root
    assert stock["received"] == 40 and stock["processed"] == 30 and stock["duplicates"] == 10, stock
    assert stock["batches"] >= 1 and stock["last_batch"] is not None
    assert [row["received"] for row in result["cli"] if row["node"] == "stock"] == [40]
    assert result["paused"][0].startswith("open until")
    assert sorted(result["trace"]) == ["shipping", "stock"]
    assert result["poison"] == 0 and result["redrive"] == 0 and result["waiting"] == 0
    assert "executors" in result["published_from"], "stock's first batch (30 emits) published from the executors"


def test_sql_id_functions_over_connect_equal_python(connect_url, amqp_uri, tmp_path):
    result = _client(connect_url, "sql", amqp_uri, tmp_path)
    assert result["auto"]["how"] == "jar"  # the local server takes the shim's jar
    assert result["python"]["how"] == "python"
    for how in ("auto", "python"):
        got = result[how]
        assert got["message_ids"] and all(sql == expected == py for sql, expected, py in got["message_ids"]), how
        assert got["correlation_ids"] and all(sql == expected == py for sql, expected, py in got["correlation_ids"])
        assert got["null"] is None


def test_notebook_02_over_connect(connect_url, amqp_uri, tmp_path):
    assert _client(connect_url, "notebook", amqp_uri, tmp_path) == {"ran": True}
