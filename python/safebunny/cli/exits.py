"""Exit codes of the ``safebunny`` command (documented in docs/operations.md, "Command line").

=====  ==========================================================================
code   meaning
=====  ==========================================================================
0      done; for ``status`` and ``poison list``: done, whatever the depths
1      nothing matched: ``trace`` found no message, ``poison show`` no such id,
       ``poison redrive`` had nothing to send
2      usage: a wrong command, argument or option (argparse's own code)
3      the saga could not be located or loaded (``module:attribute`` or file)
4      the broker: unreachable, login refused, vhost or queue missing
5      another safebunny error (a queue declared with other arguments, ...)
6      ``run --once``: messages still wait in step queues or retry tiers when
       ``--timeout`` ended (run it again)
7      ``run --once``: drained, but messages were parked in poison during the run
130    interrupted (Ctrl-C)
=====  ==========================================================================
"""

from __future__ import annotations

__all__ = ["OK", "NOT_FOUND", "USAGE", "SAGA", "BROKER", "PARKED", "CliError"]

OK = 0
NOT_FOUND = 1
USAGE = 2
SAGA = 3
BROKER = 4
ERROR = 5
LEFT = 6
PARKED = 7
INTERRUPTED = 130


class CliError(Exception):
    """An error the command line reports as one line on stderr, with its exit code."""

    def __init__(self, message: str, code: int = ERROR) -> None:
        super().__init__(message)
        self.code = code
