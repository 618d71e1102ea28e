"""An S3-compatible object store for the tests: ``moto_server`` on a loopback port, started once per session.

The endpoint reaches pyarrow and delta-rs through the standard ``AWS_*`` variables (``AWS_ENDPOINT_URL``,
``AWS_ALLOW_HTTP``, fake keys), set for the test process while the store runs and restored after.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["moto_store", "S3_ENV"]

S3_ENV = {"AWS_ACCESS_KEY_ID": "safebunny-test", "AWS_SECRET_ACCESS_KEY": "safebunny-test",
          "AWS_REGION": "us-east-1", "AWS_DEFAULT_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def moto_store() -> Iterator[str]:
    """Run ``moto_server`` on a free loopback port with one bucket; yields ``s3://<bucket>``."""
    port = _free_port()
    command = shutil.which("moto_server", path=os.path.dirname(sys.executable)) or shutil.which("moto_server")
    if command is None:
        raise RuntimeError("moto_server is not installed: install the test extra (pip install -e '.[test]')")
    process = subprocess.Popen([command, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    saved = {key: os.environ.get(key) for key in [*S3_ENV, "AWS_ENDPOINT_URL"]}
    os.environ.update(S3_ENV, AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}")
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError(f"moto_server did not answer on 127.0.0.1:{port}") from None
                time.sleep(0.2)
        import boto3

        bucket = f"safebunny-{uuid.uuid4().hex[:10]}"
        boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"]).create_bucket(Bucket=bucket)
        print(f"safebunny tests use an S3-compatible store: moto_server on 127.0.0.1:{port}, bucket {bucket}")
        yield f"s3://{bucket}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
