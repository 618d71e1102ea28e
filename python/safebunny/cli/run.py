"""``safebunny run <saga> --once|--continuous``: run a saga's steps, for a job task (Databricks serverless too).

``--once`` drains the saga (``saga.drain``) and exits with a code that says what is left
(:mod:`safebunny.cli.exits`); ``--continuous`` runs ``saga.run(spark, trigger="availableNow")`` until
Ctrl-C or SIGTERM; ``--metrics-port`` serves :class:`~safebunny.saga.look.metrics.SagaMetrics` meanwhile. The
exit codes and the session's choice (``--remote``, ``--master``, else ``getOrCreate()``): docs/operations.md
("Running a saga as a job task").
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from typing import TYPE_CHECKING, Any

from safebunny.cli import exits
from safebunny.cli.exits import CliError
from safebunny.cli.status import positive_seconds
from safebunny.errors import SafeBunnyError, moved_names
from safebunny.spark.session import run_session

if TYPE_CHECKING:
    from safebunny.saga.saga import Saga

__all__: list[str] = []
#: this module's names of earlier releases that moved (CHANGELOG.md)
__getattr__ = moved_names(__name__, {"session": "write safebunny.spark.session.run_session(remote, master)."})


def _parked(saga: Saga) -> int:
    return sum(s.parked for s in saga.status())


def once(saga: Saga, spark: Any, timeout: float, restarts: int) -> int:
    """Drain ``saga`` once; the exit code (docs/operations.md)."""
    from safebunny.spark.exceptions import message_of

    parked_before = _parked(saga)
    try:
        rounds = saga.drain(spark, timeout=timeout, restarts=restarts)
    except TimeoutError as exc:
        print(f"safebunny run: {exc}", file=sys.stderr)
        return exits.LEFT
    except SafeBunnyError:  # the command's own exit code for it (a broker error is 4)
        raise
    except Exception as exc:  # noqa: BLE001 - a step failed: one line, and its exit code
        raise CliError(f"saga {saga.name!r}: {message_of(exc)}", exits.ERROR) from exc
    parked = _parked(saga) - parked_before
    print(f"saga {saga.name}: drained in {rounds} round(s); {parked} message(s) parked in this run")
    if parked:
        print(f"safebunny run: {parked} message(s) went to poison: safebunny poison list <saga>", file=sys.stderr)
        return exits.PARKED
    return exits.OK


def continuous(saga: Saga, spark: Any, metrics_port: int | None = None, metrics_host: str = "127.0.0.1") -> int:
    """Run ``saga`` in availableNow rounds until interrupted; the exit code (docs/operations.md)."""
    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    metrics = running = None
    try:
        if metrics_port is not None:
            from safebunny.saga.look.metrics import SagaMetrics

            metrics = SagaMetrics(saga, port=metrics_port, host=metrics_host).start(spark)
            print(f"saga {saga.name}: metrics at {metrics.url}", flush=True)
        running = saga.run(spark, trigger="availableNow")
        print(f"saga {saga.name}: running {len(running.queries)} step queries in availableNow rounds "
              "(Ctrl-C or SIGTERM stops)", flush=True)
        while not running.given_up:
            time.sleep(1.0)
        errors = "; ".join(f"{label}: {running.errors.get(label)}" for label in sorted(running.given_up))
        raise CliError(f"saga {saga.name!r}: step(s) stopped for good: {errors}", exits.ERROR)
    except KeyboardInterrupt:
        print(f"saga {saga.name}: stopping", flush=True)
        return exits.OK
    finally:
        if running is not None:
            running.stop()
        if metrics is not None:
            metrics.stop()
        signal.signal(signal.SIGTERM, previous)


def _run(args: argparse.Namespace, saga: Saga) -> int:
    spark = run_session(args.remote, args.master)
    if args.once:
        return once(saga, spark, args.timeout, args.restarts)
    return continuous(saga, spark, args.metrics_port, args.metrics_host)


def add_parsers(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """Add ``run``."""
    cmd = sub.add_parser("run", parents=[common],
                         help="run the saga's steps: drain once (--once) or in availableNow rounds (--continuous)")
    mode = cmd.add_mutually_exclusive_group(required=True)
    mode.add_argument("--once", action="store_true",
                      help="drain once and exit: 0 drained, 6 messages left (timeout), 7 messages parked, 5 failed")
    mode.add_argument("--continuous", action="store_true",
                      help="run in availableNow rounds until Ctrl-C or SIGTERM (exit 0), or a step stops (5)")
    where = cmd.add_mutually_exclusive_group()
    where.add_argument("--remote", metavar="URL", help="a Spark Connect server, e.g. sc://host:15002")
    where.add_argument("--master", metavar="MASTER", help="a new local session, e.g. local[2]")
    cmd.add_argument("--timeout", type=positive_seconds, default=600.0, metavar="SECONDS",
                     help="--once: give up after this long (default 600; exit 6)")
    cmd.add_argument("--restarts", type=int, default=2, metavar="N",
                     help="--once: failures of one step in a row before it counts as failed (default 2)")
    cmd.add_argument("--metrics-port", type=int, default=None, metavar="PORT",
                     help="--continuous: serve Prometheus metrics on this port")
    cmd.add_argument("--metrics-host", default="127.0.0.1", metavar="HOST",
                     help="--continuous: the address metrics listen on (default 127.0.0.1; 0.0.0.0 for all)")
    cmd.set_defaults(run=_run)
