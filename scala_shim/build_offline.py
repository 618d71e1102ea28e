"""Build the safebunny JVM shim offline (no sbt, no Maven Central) and self-test it.

    python scala_shim/build_offline.py [--out scala_shim/target/safebunny-shim_2.13.jar]
                                       [--vectors tests/vectors/message_ids.json] [--cache]

Compiles ``python/safebunny/scala/*.scala`` (the canonical sources, shipped inside the Python
package; ``build.sbt`` compiles the same folder) with the Scala 2.13 compiler found in pyspark's
``jars/`` folder, against those jars, then runs ``safebunny.spark.SelfTest`` over every vector of
``tests/vectors/message_ids.json``. ``--cache`` builds into the user cache instead, exactly as
``safebunny.spark.shim.jar_path()`` does. Prints the jar's path. This is what CI runs.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "python"))  # the checkout's safebunny.spark.shim, not an installed copy

from safebunny.spark import shim  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(REPO / "scala_shim" / "target" / "safebunny-shim_2.13.jar"))
    parser.add_argument("--vectors", default=str(REPO / "tests" / "vectors" / "message_ids.json"))
    parser.add_argument("--cache", action="store_true", help="build into the user cache (safebunny.spark.shim.jar_path())")
    args = parser.parse_args(argv)
    started = time.monotonic()
    sources = sorted((REPO / "python" / "safebunny" / "scala").glob("*.scala"))
    if args.cache:
        path = shim.jar_path(rebuild=True)
    else:
        path = str(shim.build_jar(args.out, sources, vectors=args.vectors))
    print(f"built {path} from {len(sources)} sources in {time.monotonic() - started:.1f} s (self-test passed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
