"""Exit codes of the ``safebunny`` command (documented in docs/operations.md, "Command line")."""

from __future__ import annotations

__all__ = ["OK", "NOT_FOUND", "USAGE", "SAGA", "BROKER", "PARKED", "CliError"]

OK = 0  # done; for ``status`` and ``poison list``: done, whatever the depths
NOT_FOUND = 1  # nothing matched: ``trace`` no message, ``poison show`` no such id, ``poison redrive`` nothing to send;
#               ``view --once``: the saga's queues are not declared or its root holds no state
USAGE = 2  # a wrong command, argument or option (argparse's own code)
SAGA = 3  # the saga could not be located or loaded (``module:attribute`` or file)
BROKER = 4  # the broker: unreachable, login refused, vhost or queue missing
ERROR = 5  # another safebunny error (a queue declared with other arguments, ...)
LEFT = 6  # ``run --once``: messages still wait in step queues or retry tiers when ``--timeout`` ended
PARKED = 7  # ``run --once``: drained, but messages were parked in poison during the run
INTERRUPTED = 130  # Ctrl-C


class CliError(Exception):
    """An error the command line reports as one line on stderr, with its exit code."""

    def __init__(self, message: str, code: int = ERROR) -> None:
        super().__init__(message)
        self.code = code
