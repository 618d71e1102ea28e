"""The ``safebunny`` command line: see :mod:`safebunny.cli.main` for the commands and exit codes."""

from __future__ import annotations

from safebunny.cli.main import main

__all__ = ["main"]
