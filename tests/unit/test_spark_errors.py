"""``safebunny.error_of``: safebunny's own error found in the text of a Spark exception (pure parsing; the e2e
test ``tests/e2e/test_errors.py`` checks it on real failing queries)."""

from __future__ import annotations

import safebunny
from safebunny.errors import BrokerAuthenticationError, SafeBunnyError, SafeBunnyOptionError
from safebunny.queues.journal_owner import JournalOwnerError
from safebunny.spark.exceptions import message_of

TRACE = """Traceback (most recent call last):
  File "x.py", line 1, in f
safebunny.errors.BrokerAuthenticationError: RabbitMQ at h:5672 vhost '/' refused the login of user 'guest'.

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "y.py", line 2, in g
safebunny.queues.journal_owner.JournalOwnerError: Option 'journalLocation' belongs to another query.
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


UDF_ERROR = """[PYTHON_EXCEPTION] An exception was thrown from the Python worker. Please see the stack trace below.
Traceback (most recent call last):
  File "/job/shop.py", line 12, in loud
    raise shop.errors.BadOrder("qty must be positive")
shop.errors.BadOrder: qty must be positive
"""

PROXY_ERROR = """[FOREACH_BATCH_USER_FUNCTION_ERROR] An error occurred in the user provided function in foreach \
batch sink.
Reason: An exception was raised by the Python Proxy. Return Message: Traceback (most recent call last):
  File "/venv/py4j/clientserver.py", line 617, in _call_proxy
    return_value = getattr(self.pool[obj_id], method)(*params)
pyspark.errors.exceptions.captured.AnalysisException: [UNRESOLVED_COLUMN.WITH_SUGGESTION] A column with name \
`qtyy` cannot be resolved. Did you mean one of the following? [`qty`]. SQLSTATE: 42703;
'Project ['qtyy]
+- LogicalRDD [qty#1], false

 SQLSTATE: 39000
=== Streaming Query ===
Current State: ACTIVE
Thread State: RUNNABLE"""


def test_the_python_exception_class_a_worker_raised_is_found_without_its_module():
    from safebunny.spark.exceptions import raised_in_python

    assert raised_in_python(RuntimeError(UDF_ERROR)) == ("BadOrder", "qty must be positive")
    assert raised_in_python(PROXY_ERROR)[0] == "AnalysisException"
    assert raised_in_python("no traceback here") is None


def test_plan_errors_are_told_from_others_and_message_of_names_the_cause():
    from safebunny.spark.exceptions import is_plan_error

    assert is_plan_error(RuntimeError(PROXY_ERROR))
    assert not is_plan_error(RuntimeError(UDF_ERROR)) and not is_plan_error(None)
    assert message_of(RuntimeError(PROXY_ERROR)).startswith("AnalysisException: [UNRESOLVED_COLUMN.WITH_SUGGESTION]")
    assert "qtyy" in message_of(RuntimeError(PROXY_ERROR))


def test_an_isolated_udf_failure_is_typed_by_the_class_the_udf_raised():
    from safebunny.exactly_once.handlers.frame_handler import describe

    class PythonException(Exception):  # noqa: N818 - Spark's name, as a UDF's failure reaches the driver
        pass

    assert describe(PythonException(UDF_ERROR)) == ("BadOrder", "qty must be positive")
    assert describe(ValueError("plain"))[0] == "ValueError"


def test_a_python_process_that_did_not_connect_back_is_told_apart_through_causes():
    from safebunny.spark.exceptions import is_worker_start_timeout

    spark_text = ("[STREAM_FAILED] Query [id = 1] terminated with exception: org.apache.spark.SparkException: "
                  "Python worker failed to connect back.\n\tat org.apache.spark.api.python.PythonWorkerFactory")
    wrapped = RuntimeError("the query stopped")
    wrapped.__cause__ = RuntimeError(spark_text)
    assert is_worker_start_timeout(RuntimeError(spark_text)) and is_worker_start_timeout(wrapped)
    assert not is_worker_start_timeout(RuntimeError(UDF_ERROR)) and not is_worker_start_timeout(None)
