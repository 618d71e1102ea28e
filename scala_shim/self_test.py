"""Run the shim's self-test on a jar built by any route (``tools/sbt package``, the offline build, a download).

    python scala_shim/self_test.py JAR [--vectors tests/vectors/message_ids.json]

Runs ``safebunny.spark.SelfTest`` from JAR over its built-in vectors and every vector of the JSON file, the
same file the Python tests check ``safebunny.ids`` against; prints the count, exits 1 on any mismatch.
``make shim-jar`` runs it on sbt's jar.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "python"))  # the checkout's safebunny.spark.shim, not an installed copy

from safebunny.spark import shim  # noqa: E402
from safebunny.errors import SafeBunnyError  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("jar")
    parser.add_argument("--vectors", default=str(REPO / "tests" / "vectors" / "message_ids.json"))
    args = parser.parse_args(argv)
    if not Path(args.jar).is_file():
        print(f"self_test: no jar at '{args.jar}'", file=sys.stderr)
        return 2
    try:
        passed = shim.self_test(args.jar, args.vectors)
    except SafeBunnyError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    print(f"self-test of {args.jar}: {passed} vectors passed ({args.vectors} and the built-in ones)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
