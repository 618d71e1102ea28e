"""Prometheus metrics of a saga's steps: ``SagaMetrics(saga).start(spark)`` serves ``/metrics`` on a port.

Per step, a ``StreamingQueryListener``'s last progress (or, where it cannot reach this process, the step's
batch reports, :mod:`safebunny.saga.run.reports`) joined with what ``saga.status()`` reads at each scrape.
Standard library HTTP server (``http.server``) in a daemon thread. The metrics and a scrape config:
docs/operations.md.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Iterable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from safebunny.saga.run.reports import COUNTERS, StepCounters

__all__ = ["SagaMetrics", "render"]

log = logging.getLogger("safebunny.metrics")
DEFAULT_PORT = 9108
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

#: name -> (type, help, field of the step's sample); a counter per :data:`~safebunny.saga.run.reports.COUNTERS`
METRICS: dict[str, tuple[str, str, str]] = {
    **{f"safebunny_step_{name}_total": ("counter", meaning, name) for name, meaning in COUNTERS.items()},
    "safebunny_step_backlog": ("gauge", "Messages ready in the step's queue.", "backlog"),
    "safebunny_step_retrying": ("gauge", "Messages waiting in the step's retry tiers.", "retrying"),
    "safebunny_step_unacked": ("gauge", "Messages delivered to the step and not yet acknowledged (management API).",
                               "unacked"),
    "safebunny_step_rate": ("gauge", "Messages received per second over the last minute (from the counters).",
                            "input_rate"),
    "safebunny_step_input_rows_per_second": ("gauge", "Input rows per second of the query's last progress.",
                                             "inputRowsPerSecond"),
    "safebunny_step_processed_rows_per_second": ("gauge", "Processed rows per second of the query's last progress.",
                                                 "processedRowsPerSecond"),
    "safebunny_step_last_batch_rows": ("gauge", "Rows of the query's last batch.", "numInputRows"),
    "safebunny_step_last_batch_seconds": ("gauge", "Duration of the query's last batch.", "batchSeconds"),
    "safebunny_step_last_batch_id": ("gauge", "Id of the query's last batch.", "batchId"),
    "safebunny_step_query_active": ("gauge", "1 while the step's query runs in this driver, else 0.", "active"),
}


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: Any) -> str | None:
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    if math.isnan(number):
        return "NaN"
    return str(int(number)) if number.is_integer() and abs(number) < 2**53 else repr(number)


def render(saga_name: str, samples: Iterable[Mapping[str, Any]]) -> str:
    """Prometheus text exposition (format 0.0.4) of per-step ``samples`` (each with ``step`` and fields
    named in :data:`METRICS`); a field that is None or missing is left out, not reported as 0."""
    rows = list(samples)
    lines = []
    for name, (kind, text, field) in METRICS.items():
        values = []
        for row in rows:
            number = _number(row.get(field))
            if number is not None:
                labels = f'saga="{_escape(saga_name)}",step="{_escape(str(row["step"]))}"'
                values.append(f"{name}{{{labels}}} {number}")
        if values:
            lines += [f"# HELP {name} {text}", f"# TYPE {name} {kind}", *values]
    return "\n".join(lines) + "\n"


class SagaMetrics:
    """Serves the metrics of ``saga``'s steps on ``host:port`` (``port=0`` picks a free one; see :attr:`port`)."""

    def __init__(self, saga: Any, port: int = DEFAULT_PORT, host: str = "127.0.0.1", listener: bool = True) -> None:
        """``listener=False``: add no ``StreamingQueryListener``; the progress gauges come from the durable
        per-batch counters (see the module docstring)."""
        self.saga = saga
        self.use_listener = listener
        self.host = host
        self.requested_port = port
        self.progress: dict[str, dict[str, Any]] = {}  # step label -> last progress fields
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._spark: Any = None
        self.listener: Any = None

    @property
    def port(self) -> int:
        return self._server.server_address[1] if self._server is not None else self.requested_port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    # -- the listener --------------------------------------------------------------------------
    def _label_of(self, query_name: str | None) -> str | None:
        prefix = f"{self.saga.name}."
        if not query_name or not query_name.startswith(prefix):
            return None  # another query of the session
        label = query_name[len(prefix):]
        return label if any(s.unit_label == label for s in self.saga.units()) else None

    def on_progress(self, progress: Any) -> None:
        label = self._label_of(progress.name)
        if label is None:
            return
        with self._lock:
            self.progress[label] = {
                "inputRowsPerSecond": progress.inputRowsPerSecond,
                "processedRowsPerSecond": progress.processedRowsPerSecond,
                "numInputRows": progress.numInputRows, "batchId": progress.batchId,
                "batchSeconds": (progress.batchDuration or 0) / 1000.0, "active": 1}

    def on_terminated(self, query_name: str | None) -> None:
        label = self._label_of(query_name)
        if label is not None:
            with self._lock:
                self.progress.setdefault(label, {})["active"] = 0

    # -- a scrape ------------------------------------------------------------------------------
    def samples(self) -> list[dict[str, Any]]:
        """Per step: the durable status (without reading poison queues) and the last progress seen here, or,
        where the listener saw none (or there is none), the last batch its stored reports hold."""
        from safebunny.saga.look.status import status_fields

        with self._lock:
            progress = {k: dict(v) for k, v in self.progress.items()}
        active = self._active_queries()
        out = []
        for step, (fields, counters) in zip(self.saga.steps, status_fields(self.saga, poison=False), strict=True):
            label = f"{fields['node']}.{fields['type']}"
            seen = _step_progress(progress, label)
            if seen is None:
                seen = _durable_progress(counters, step.shards is None)
                seen["active"] = int(any(u.unit_label in active for u in step.units())) if active is not None else 0
            out.append({"step": label, **fields, **seen})
        return out

    def _active_queries(self) -> set[str] | None:
        """Without a listener: the labels of the session's active step queries; else None."""
        if self._spark is None or self.listener is not None:
            return None
        try:
            names = [q.name for q in self._spark.streams.active]
        except Exception as exc:  # noqa: BLE001 - a scrape without "active" beats a failed scrape
            log.debug("saga %s: active queries unknown: %s", self.saga.name, exc)
            return None
        return {label for label in map(self._label_of, names) if label is not None}

    def text(self) -> str:
        return render(self.saga.name, self.samples())

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self, spark: Any) -> SagaMetrics:
        """Add the listener to ``spark``'s streams (unless ``listener=False``; one that cannot be added is
        logged, and the durable counters stand in) and serve ``/metrics`` in a daemon thread."""
        if self.use_listener:
            listener = _listener(self)
            try:
                spark.streams.addListener(listener)
                self.listener = listener
            except Exception as exc:  # noqa: BLE001 - the metrics still come, from the durable counters
                log.warning("saga %s: no StreamingQueryListener (%s); the progress gauges come from the steps' "
                            "durable counters", self.saga.name, exc)
        self._spark = spark
        self._server = ThreadingHTTPServer((self.host, self.requested_port), _handler(self))
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name=f"safebunny-metrics-{self.saga.name}",
                         daemon=True).start()
        log.info("saga %s: metrics at %s", self.saga.name, self.url)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._spark is not None and self.listener is not None:
            self._spark.streams.removeListener(self.listener)
        self._spark = None
        self.listener = None

    def __enter__(self) -> SagaMetrics:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _step_progress(progress: dict[str, dict[str, Any]], label: str) -> dict[str, Any] | None:
    """A step's last progress: its query's, or its shards' queries' together (rates and rows added, the
    longest batch, active when any is); None when none of them reported one."""
    parts = [v for k, v in progress.items() if k == label or k.startswith(f"{label}.shard.")]
    if len(parts) <= 1:
        return parts[0] if parts else None
    out: dict[str, Any] = {"active": max(p.get("active", 0) for p in parts)}
    for name in ("inputRowsPerSecond", "processedRowsPerSecond", "numInputRows"):
        values = [p[name] for p in parts if p.get(name) is not None]
        if values:
            out[name] = sum(values)
    seconds = [p["batchSeconds"] for p in parts if p.get("batchSeconds") is not None]
    if seconds:
        out["batchSeconds"] = max(seconds)
    return out


def _durable_progress(counters: StepCounters, unsharded: bool) -> dict[str, Any]:
    """A step's last batch from the counters its status read (its shards' together: rows added, the longest
    batch); the id only for an unsharded step."""
    rows, seconds = counters.last_received, counters.last_seconds
    if rows is None or seconds is None:
        return {}
    out: dict[str, Any] = {"numInputRows": rows, "batchSeconds": seconds}
    if seconds > 0:
        out["processedRowsPerSecond"] = rows / seconds
    if unsharded:
        out["batchId"] = counters.last_batch_id
    return out


def _listener(metrics: SagaMetrics) -> Any:
    from pyspark.sql.streaming.listener import StreamingQueryListener

    class _SagaListener(StreamingQueryListener):
        """Keeps each step query's last progress for :class:`SagaMetrics` (runs on the driver)."""

        def __init__(self) -> None:
            super().__init__()
            self.names: dict[str, str] = {}  # query id -> name (a termination event has no name)

        def onQueryStarted(self, event: Any) -> None:  # noqa: N802 - PySpark's names
            self.names[str(event.id)] = event.name

        def onQueryProgress(self, event: Any) -> None:  # noqa: N802
            metrics.on_progress(event.progress)

        def onQueryTerminated(self, event: Any) -> None:  # noqa: N802
            metrics.on_terminated(self.names.pop(str(event.id), None))

    return _SagaListener()


def _handler(metrics: SagaMetrics) -> type[BaseHTTPRequestHandler]:
    class _Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path.split("?", 1)[0] not in ("/metrics", "/"):
                self.send_error(404, "only /metrics here")
                return
            try:
                body, code = metrics.text().encode(), 200
            except Exception as exc:  # noqa: BLE001 - a scrape reports the failure instead of hanging up
                log.warning("saga %s: metrics scrape failed: %s", metrics.saga.name, exc)
                body, code = f"# safebunny: the scrape failed: {type(exc).__name__}\n".encode(), 503
            self.send_response(code)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet: one line per scrape is noise
            pass

    return _Handler
