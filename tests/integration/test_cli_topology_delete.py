"""``safebunny topology delete`` on the real broker: refuses without ``--yes`` (saying what would go), then
deletes every queue and exchange of the saga."""

from __future__ import annotations

import pika
import pytest

from safebunny.cli.main import main

SAGA = """
import safebunny

saga = safebunny.Saga({name!r}, uri={uri!r}, root={root!r},
                      settings=safebunny.SagaSettings(retry=safebunny.Retry(delays=("1s",))))


@saga.step("greeter", consumes="NameGiven", from_node="app", schema="name string")
def greet(names, ctx):
    return None
"""


def _exists(uri: str, kind: str, name: str) -> bool:
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    try:
        ch = conn.channel()
        (ch.queue_declare if kind == "queue" else ch.exchange_declare)(name, passive=True)
        return True
    except pika.exceptions.ChannelClosedByBroker as exc:
        assert exc.reply_code == 404
        return False
    finally:
        if conn.is_open:
            conn.close()


def test_topology_delete_needs_yes_then_deletes_everything(amqp_uri, admin, unique_name, tmp_path, capsys):
    saga_file = tmp_path / "greeting.py"
    saga_file.write_text(SAGA.format(name=unique_name, uri=amqp_uri, root=str(tmp_path / "root")), "utf-8")
    assert main(["topology", "declare", str(saga_file)]) == 0
    step_queue = f"{unique_name}.greeter.NameGiven"
    names = [step_queue, f"{step_queue}.retry.0", f"{step_queue}.poison", f"{unique_name}.unrouted"]
    admin.publish(step_queue, [b'{"name": "ada"}'])
    assert all(_exists(amqp_uri, "queue", n) for n in names) and _exists(amqp_uri, "exchange", unique_name)
    capsys.readouterr()

    assert main(["topology", "delete", str(saga_file)]) == 2
    err = capsys.readouterr().err
    assert "4 queues" in err and "1 message(s)" in err and "--yes" in err
    assert all(_exists(amqp_uri, "queue", n) for n in names)  # nothing deleted without --yes

    assert main(["topology", "delete", str(saga_file), "--yes"]) == 0
    out = capsys.readouterr().out
    assert f"deleted 4 queues (1 message(s) with them) and the exchanges of saga {unique_name!r}" in out
    assert not any(_exists(amqp_uri, "queue", n) for n in names)
    assert not _exists(amqp_uri, "exchange", unique_name)


@pytest.fixture(autouse=True)
def _no_env_uri(monkeypatch):
    monkeypatch.delenv("SAFEBUNNY_URI", raising=False)
    monkeypatch.delenv("SAFEBUNNY_PASSWORD", raising=False)
