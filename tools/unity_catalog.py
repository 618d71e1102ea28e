"""Start and stop a local Unity Catalog OSS server for tests (issue 47 item 4; notes: docs in the report).

    python tools/unity_catalog.py start --home UC_SOURCE [--run DIR] [--port 8080] [--catalog C --schema S]
    python tools/unity_catalog.py stop --run DIR

``UC_SOURCE`` is a Unity Catalog source tree whose server was built with ``build/sbt server/package``
(``server/target/classpath`` and ``etc/conf`` are used): ``io.unitycatalog:unitycatalog-server`` and
``unitycatalog-spark_*`` are not served by Maven Central here (only ``unitycatalog-client`` and
``unitycatalog-hadoop`` are), so there is no way to fetch it in CI. ``start`` copies ``etc/`` into ``--run``
(the server reads ``etc/conf`` from its working directory and keeps its H2 database in ``etc/db``), starts the
server on ``--port`` (it also binds port + 1), waits until the REST API answers, creates the catalog (with a
storage root under ``--run``, for managed tables) and the schema, and writes ``server.pid``; ``stop`` kills
that process. Spark side: ``spark.sql.catalog.<catalog>=io.unitycatalog.spark.UCSingleCatalog``,
``.uri=http://127.0.0.1:<port>``, ``.token=`` (empty).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path


def _api(port: int, path: str, body: dict | None = None) -> dict:
    url = f"http://127.0.0.1:{port}/api/2.1/unity-catalog/{path}"
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"},
                                     method="GET" if body is None else "POST")
    with urllib.request.urlopen(request, timeout=20) as response:
        return json.loads(response.read() or b"{}")


def start(home: Path, run: Path, port: int, catalog: str | None, schema: str | None, timeout: float) -> int:
    classpath = home / "server" / "target" / "classpath"
    if not classpath.is_file():
        raise SystemExit(f"unity_catalog: no '{classpath}': build the server first (sbt server/package in {home})")
    run.mkdir(parents=True, exist_ok=True)
    if not (run / "etc").exists():
        shutil.copytree(home / "etc", run / "etc", ignore=shutil.ignore_patterns("logs"))
    log = open(run / "server.out", "ab")
    java = str(Path(os.environ["JAVA_HOME"], "bin", "java")) if os.environ.get("JAVA_HOME") else "java"
    proc = subprocess.Popen([java, "-cp", classpath.read_text().strip(), "io.unitycatalog.server.UnityCatalogServer",
                             "-p", str(port)], cwd=run, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    (run / "server.pid").write_text(str(proc.pid))
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"unity_catalog: the server exited ({proc.returncode}); see {run / 'server.out'}")
        try:
            _api(port, "catalogs")
            break
        except (urllib.error.URLError, OSError, ValueError):
            if time.monotonic() > deadline:
                stop(run)
                raise SystemExit(f"unity_catalog: no answer on port {port} within {timeout:.0f} s")
            time.sleep(1)
    if catalog:
        names = {c["name"] for c in _api(port, "catalogs").get("catalogs", [])}
        if catalog not in names:
            storage = run / "storage"
            storage.mkdir(exist_ok=True)
            _api(port, "catalogs", {"name": catalog, "storage_root": storage.resolve().as_uri()})
        if schema:
            names = {s["name"] for s in _api(port, f"schemas?catalog_name={catalog}").get("schemas", [])}
            if schema not in names:
                _api(port, "schemas", {"name": schema, "catalog_name": catalog})
    print(f"unity catalog server {proc.pid} on http://127.0.0.1:{port} (run dir {run})")
    return proc.pid


def stop(run: Path) -> None:
    pid_file = run / "server.pid"
    if not pid_file.is_file():
        return
    pid = int(pid_file.read_text())
    try:
        os.killpg(pid, signal.SIGTERM)  # its own session (start_new_session): the JVM and nothing else
        for _ in range(30):
            os.kill(pid, 0)
            time.sleep(0.5)
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    pid_file.unlink()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_start = sub.add_parser("start")
    p_start.add_argument("--home", required=True, type=Path)
    p_start.add_argument("--run", type=Path, default=Path(".tmp/unity-catalog"))
    p_start.add_argument("--port", type=int, default=8080)
    p_start.add_argument("--catalog")
    p_start.add_argument("--schema")
    p_start.add_argument("--timeout", type=float, default=180.0)
    p_stop = sub.add_parser("stop")
    p_stop.add_argument("--run", type=Path, default=Path(".tmp/unity-catalog"))
    args = parser.parse_args(argv)
    if args.command == "start":
        start(args.home, args.run, args.port, args.catalog, args.schema, args.timeout)
    else:
        stop(args.run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
