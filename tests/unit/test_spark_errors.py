"""``safebunny.error_of``: safebunny's own error found in the text of a Spark exception (pure parsing; the e2e
test ``tests/e2e/test_errors.py`` checks it on real failing queries)."""

from __future__ import annotations

import safebunny
from safebunny.errors import BrokerAuthenticationError, SafeBunnyError, SafeBunnyOptionError
from safebunny.journal_owner import JournalOwnerError
from safebunny.spark_errors import message_of

TRACE = """Traceback (most recent call last):
  File "x.py", line 1, in f
safebunny.errors.BrokerAuthenticationError: RabbitMQ at h:5672 vhost '/' refused the login of user 'guest'.

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "y.py", line 2, in g
safebunny.journal_owner.JournalOwnerError: Option 'journalLocation' belongs to another query.
 SQLSTATE: 38000
	at org.apache.spark.sql.execution.python.PythonRunner.handle(PythonRunner.scala:1)"""


def test_the_last_safebunny_error_in_the_text_is_rebuilt_with_its_class_and_message():
    spark = RuntimeError(TRACE)
    error = safebunny.error_of(spark)
    assert type(error) is JournalOwnerError and isinstance(error, SafeBunnyOptionError)
    assert str(error) == "Option 'journalLocation' belongs to another query."
    assert error.__cause__ is spark


def test_a_cause_or_the_error_itself_counts_and_other_errors_carry_none():
    own = BrokerAuthenticationError("refused")
    assert safebunny.error_of(own) is own
    try:
        try:
            raise own
        except SafeBunnyError as exc:
            raise RuntimeError("wrapped") from exc
    except RuntimeError as wrapped:
        assert safebunny.error_of(wrapped) is own
    assert safebunny.error_of(RuntimeError("java.lang.IllegalStateException: boom")) is None
    assert safebunny.error_of(RuntimeError("safebunny.errors.NoSuchThing: x")) is None
    assert safebunny.error_of(None) is None


def test_message_of_is_one_line():
    assert message_of(RuntimeError(TRACE)) == "JournalOwnerError: Option 'journalLocation' belongs to another query."
    assert message_of(RuntimeError("first\nsecond")) == "first"
