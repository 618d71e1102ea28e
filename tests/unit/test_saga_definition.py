"""Saga definitions without a broker or a JVM: a schema typo at declaration, a row handler's malformed body,
routing checks, the URI's password, and the poison listing's one entry per message id."""

from __future__ import annotations

import logging
import re
from types import SimpleNamespace

import pytest

import safebunny
from safebunny.errors import SafeBunnyOptionError
from safebunny.saga.define import definition as checks
from safebunny.saga.define.definition import SagaStep
from safebunny.saga.look.parked import latest_per_id
from safebunny.saga.run.republish import copy_id

URI = "amqp://guest:guest@127.0.0.1:5672/%2F"


def _saga(tmp_path, **kw):
    return safebunny.Saga("shop", uri=URI, root=str(tmp_path), settings=safebunny.SagaSettings(**kw))


def _step(node, consumes, from_node, produces=(), fails_as=None):
    return SagaStep(node, consumes, from_node, "id string", lambda *a: None, tuple(produces), fails_as=fails_as)


# ------------------------------------------------------------------------------------- schema parsing
def test_a_schema_typo_fails_when_the_step_is_declared_naming_the_step(tmp_path):
    saga = _saga(tmp_path)
    with pytest.raises(SafeBunnyOptionError, match=r"Step stock\.OrderPlaced: schema .* unknown type 'strin'"):
        @saga.step("stock", consumes="OrderPlaced", from_node="orders", schema="orderId strin, qty int")
        def reserve(df, ctx):
            return None
    assert saga.steps == []


# the schema's grammar and the body rules: test_bodies.py
# ------------------------------------------------------------------------------------- routing checks
def test_unfed_routes_are_found_and_entry_points_are_not():
    steps = [_step("stock", "OrderPlaced", "orders", produces=["StockReserved"], fails_as="StockFailed"),
             _step("payment", "StockReserved", "stock", produces=["PaymentCharged"]),
             _step("shipping", "PaymentCharge", "payment"),  # typo: payment produces PaymentCharged
             _step("stock", "StockFailed", "stock")]  # fed by fails_as
    problems = checks.unfed_routes(steps)
    assert len(problems) == 1 and "step shipping.PaymentCharge consumes 'PaymentCharge' from node 'payment'" in \
        problems[0]
    assert "produces does not route" in problems[0] and "would stay empty" not in problems[0]
    assert checks.unfed_routes(steps, started={("payment", "PaymentCharge")}) == []


def test_undeclared_emits_name_the_type():
    step = _step("payment", "StockReserved", "stock", produces=["PaymentCharged"])
    assert checks.undeclared_emits(step, ["PaymentCharged"]) == []
    [problem] = checks.undeclared_emits(step, ["PaymentCharged", "PaymentDeclined", "PaymentDeclined"])
    assert "emitted a message of type 'PaymentDeclined', which is not in its produces ['PaymentCharged']" in problem
    assert "published all the same" in problem and "unrouted stream" in problem


def test_check_warns_once_or_raises_when_strict(tmp_path, caplog):
    for strict in (False, True):
        saga = _saga(tmp_path, strict=strict)
        saga.step("payment", consumes="StockReserved", from_node="stock", schema="id string",
                  produces=["PaymentCharged"])(lambda df, ctx: None)
        saga.step("shipping", consumes="PaymentCharge", from_node="payment", schema="id string")(lambda df, ctx: None)
        if strict:
            with pytest.raises(SafeBunnyOptionError, match="strict=True.*shipping.PaymentCharge"):
                saga.check()
            with pytest.raises(SafeBunnyOptionError, match="'Oops', which is not in its produces"):
                saga._check_emits(saga.steps[0], ["Oops"])
        else:
            with caplog.at_level(logging.WARNING, logger="safebunny.saga"):
                saga.check()
                saga.check()
                saga._check_emits(saga.steps[0], ["Oops"])
                saga._check_emits(saga.steps[0], ["Oops"])
            lines = [r.getMessage() for r in caplog.records]
            assert sum("shipping.PaymentCharge" in m for m in lines) == 1
            assert sum("'Oops'" in m for m in lines) == 1


# ------------------------------------------------------------------------------------- the URI's password
def test_a_password_inside_uri_is_kept_apart_from_it(tmp_path):
    saga = safebunny.Saga("shop", uri="amqp://app:p%2F%40%3A%25x9@127.0.0.1:5672/%2F", root=str(tmp_path))
    assert saga.uri == "amqp://app@127.0.0.1:5672/%2F" and saga.password == "p/@:%x9"
    assert saga.connection_uri == "amqp://app:p%2F%40%3A%25x9@127.0.0.1:5672/%2F"
    explicit = safebunny.Saga("shop", uri="amqp://app:old@h/%2F", root=str(tmp_path), password="new")
    assert explicit.uri == "amqp://app@h/%2F" and explicit.password == "new"
    explicit.uri = "amqp://app:cli@h/%2F"  # the command line's --uri replaces it
    assert explicit.password == "cli" and explicit.uri == "amqp://app@h/%2F"
    explicit.uri = "amqp://app@other/%2F"
    assert explicit.password == "cli"


def test_a_bad_uri_query_parameter_is_an_option_error_without_the_password(tmp_path):
    with pytest.raises(SafeBunnyOptionError, match="invalid query parameter.*heartbeat") as err:
        safebunny.Saga("shop", uri="amqp://app:secret@127.0.0.1:5672/%2F?heartbeat=abc", root=str(tmp_path))
    assert "secret" not in str(err.value)


# ------------------------------------------------------------------------------------- copies and listing
def test_copy_ids_are_derived_per_message_queue_and_attempt():
    assert copy_id("m1", "shop.a.T.retry.0", 1) == copy_id("m1", "shop.a.T.retry.0", 1)
    assert len({copy_id("m1", "shop.a.T.retry.0", 1), copy_id("m1", "shop.a.T.retry.1", 2),
                copy_id("m2", "shop.a.T.retry.0", 1), copy_id("m1", "shop.a.T.poison", 3)}) == 4
    assert copy_id("m1", "q", 1) == safebunny.message_id("m1", "q", "copy", 1)


def test_the_poison_listing_keeps_the_latest_copy_of_each_message():
    p = lambda mid, n: (SimpleNamespace(message_id=mid, n=n), b"", n)  # noqa: E731
    kept = latest_per_id([p("a", 0), p("b", 1), p("a", 2), p(None, 3), p(None, 4), p("b", 5)])
    assert [(e[0].message_id, e[2]) for e in kept] == [("a", 2), (None, 3), (None, 4), ("b", 5)]


def test_a_row_handler_emitting_a_type_outside_produces_is_checked(tmp_path):
    from safebunny.saga.define.definition import wrap

    for strict in (False, True):
        saga = _saga(tmp_path, strict=strict)
        saga.step("payment", consumes="StockReserved", from_node="stock", schema="orderId string", rows=True,
                  produces=["PaymentCharged"])(
            lambda msg, ctx: safebunny.Outcome(emits=[safebunny.emit({"orderId": msg["orderId"]},
                                                                     type="PaymentDeclined")]))
        handler = wrap(saga.steps[0], saga._check_emits)
        row = {"messageId": "m1", "value": b'{"orderId": "o1"}'}
        if strict:
            with pytest.raises(SafeBunnyOptionError, match="'PaymentDeclined', which is not in its produces"):
                handler(row, None)
        else:
            assert handler(row, None).emits[0].type == "PaymentDeclined"
            assert any("PaymentDeclined" in w for w in saga._warned)


def test_a_row_handler_gets_a_mistyped_body_as_malformed(tmp_path):
    from safebunny.saga.define.bodies import MalformedMessage
    from safebunny.saga.define.definition import wrap

    saga, seen = _saga(tmp_path), []
    saga.step("a", consumes="T", from_node="b", schema="userId string", rows=True)(lambda m, c: None)
    saga.step("a", consumes="U", from_node="b", schema="userId string", rows=True, strict_schema=False)(
        lambda m, c: seen.append(m))
    with pytest.raises(MalformedMessage, match="field 'userId' has 17 \\(a number\\), but the schema expects string"):
        wrap(saga.steps[0])({"value": b'{"userId": 17}'}, None)
    wrap(saga.steps[1])({"value": b'{"userId": 17}'}, None)
    assert seen[0]["userId"] == 17  # strict_schema=False: a row handler gets the body as it is


def test_saga_settings_are_one_object_and_retry_tiers_in_their_place_are_refused(tmp_path):
    with pytest.raises(safebunny.SafeBunnyOptionError, match=r"SagaSettings\(retry=") as caught:
        safebunny.Saga("shop", URI, str(tmp_path), safebunny.Retry(delays=("1s",)))  # the fourth argument before
    assert caught.value.option == "settings"
    settings = safebunny.SagaSettings(batch_size=5, driver="host-a")
    saga = safebunny.Saga("shop", URI, str(tmp_path), settings)
    assert saga.config.settings is settings and saga.config.layout.driver == "host-a"
    with pytest.raises(safebunny.SafeBunnyOptionError, match="batch_size must be >= 1"):
        safebunny.SagaSettings(batch_size=0)


@pytest.mark.parametrize("root", ["", "  "])
def test_an_empty_root_is_refused_naming_what_to_give(root: str) -> None:
    """An empty root would become the working directory, silently."""
    with pytest.raises(SafeBunnyOptionError, match=r"Saga's root must name where the saga keeps its state.*"
                                                   r"give a path or URI") as info:
        safebunny.Saga("shop", uri=URI, root=root)
    assert info.value.option == "root"
    with pytest.raises(SafeBunnyOptionError, match=r"Step's inbox must name the inbox Delta table.*"
                                                   r"give a path or URI") as info:
        safebunny.Step("stock", root)
    assert info.value.option == "inbox"


@pytest.mark.parametrize("keyword, value", [("retry", safebunny.Retry()), ("batch_size", 500), ("driver", "a"),
                                            ("checkpoints", "/tmp/cp")])
def test_the_saga_keywords_of_earlier_releases_name_their_settings(keyword, value):
    with pytest.raises(safebunny.SafeBunnyOptionError, match=rf"SagaSettings\({keyword}=\.\.\.\)") as caught:
        safebunny.Saga("orders", uri="amqp://app:s3cret@h/%2F", root="/tmp/sb-moved", **{keyword: value})
    assert caught.value.option == keyword and "s3cret" not in str(caught.value)
    assert "CHANGELOG.md" in str(caught.value)


@pytest.mark.parametrize("keyword, new_form", [("uri", r"StepSettings\(connection=safebunny.ConnectionSettings"),
                                               ("window", r"StepSettings\(window=\.\.\.\)"),
                                               ("epoch", r"StepSettings\(epoch=\.\.\.\)")])
def test_the_step_keywords_of_earlier_releases_name_their_settings(keyword, new_form, tmp_path):
    with pytest.raises(safebunny.SafeBunnyOptionError, match=new_form) as caught:
        safebunny.Step("billing", str(tmp_path / "inbox"), **{keyword: "x"})
    assert caught.value.option == keyword


def test_saga_settings_check_the_executor_publishing_they_declare_with_the_step():
    with pytest.raises(safebunny.SafeBunnyOptionError, match="executor_publish_rows must be 'auto'"):
        safebunny.SagaSettings(executor_publish_rows="many")
    settings = safebunny.SagaSettings(executor_publish_rows=10, executor_partition_rows=5)
    assert settings.executor_publishing() == {"executor_publish_rows": 10, "executor_partition_rows": 5}
    saga = safebunny.Saga("orders", "amqp://app:s3cret@h/%2F", "/tmp/sb-exec", settings)
    assert saga.config.connection.password == "s3cret" and "s3cret" not in repr(saga.config)


def test_saga_config_takes_its_broker_as_connection_settings_and_names_the_old_forms():
    from safebunny.errors import SafeBunnyMovedError
    from safebunny.options.connection import ConnectionSettings
    from safebunny.saga.define.config import SagaConfig, SagaLayout

    layout = SagaLayout("/tmp/sb-config")
    with pytest.raises(safebunny.SafeBunnyOptionError, match=r"SagaConfig\(name, ConnectionSettings\(uri, password\)"):
        SagaConfig("orders", "amqp://h/%2F", layout)
    with pytest.raises(safebunny.SafeBunnyOptionError, match=r"SagaConfig\(password=\.\.\.\)"):
        SagaConfig("orders", ConnectionSettings("amqp://h/%2F"), layout, password="s3cret")
    config = SagaConfig("orders", ConnectionSettings("amqp://app:s3cret@h/%2F"), layout)
    for old, new in (("uri", "config.connection.uri"), ("password", "config.connection.password"),
                     ("connection_uri", "config.connection.login_uri")):
        with pytest.raises(SafeBunnyMovedError, match=re.escape(new)):
            getattr(config, old)
    assert config.connection.login_uri == "amqp://app:s3cret@h/%2F"

