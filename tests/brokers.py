"""Real RabbitMQ brokers for the tests.

:func:`acquire_broker` picks one in this order and says which: ``SAFEBUNNY_TEST_AMQP_URI``;
a broker already answering on 127.0.0.1:5672; a throwaway ``rabbitmq-server`` from the
Debian package on free ports; testcontainers' RabbitMQ where a Docker engine answers.
:class:`ThrowawayBroker` is also used directly by tests that stop or restart a broker.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Broker", "ThrowawayBroker", "acquire_broker", "free_port", "amqp_answers", "end_processes",
           "processes_with_env"]

RABBIT_BIN = Path(os.environ.get("SAFEBUNNY_RABBIT_BIN", "/usr/lib/rabbitmq/bin"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def amqp_answers(uri: str, timeout: float = 3.0) -> bool:
    """True when an AMQP handshake with ``uri`` succeeds."""
    import pika

    params = pika.URLParameters(uri)
    params.socket_timeout = timeout
    params.blocked_connection_timeout = timeout
    params.connection_attempts = 1
    try:
        pika.BlockingConnection(params).close()
        return True
    except Exception:
        return False


@dataclass
class Broker:
    """A broker the tests can use: its AMQP URI, where it came from, how to stop it."""

    uri: str
    origin: str
    stream_port: int | None = None
    management_port: int | None = None
    stop: Callable[[], None] = field(default=lambda: None)
    #: runs ``rabbitmqctl <args>`` against this broker; ``None`` when the tests cannot (a remote broker)
    ctl: Callable[..., str] | None = None


class ThrowawayBroker:
    """A private ``rabbitmq-server`` on free loopback ports with its own data and logs.

    Start costs about 7 s and stop about 9 s on the reference machine, so share one per
    test session unless the test must restart or stop it.
    """

    def __init__(self, plugins: tuple[str, ...] = ("rabbitmq_stream",), extra_config: tuple[str, ...] = (),
                 advanced_config: str = "[].") -> None:
        self.extra_config = extra_config
        self.advanced_config = advanced_config
        self.base = Path(tempfile.mkdtemp(prefix="safebunny-broker-"))
        self.node = f"sbtest{os.getpid()}x{free_port()}@localhost"
        self.port = free_port()
        self.dist_port = free_port()
        self.epmd_port = free_port()
        self.stream_port = free_port() if "rabbitmq_stream" in plugins else None
        self.plugins = plugins
        self.uri = f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"
        self.pid_file = self.base / "rabbit.pid"

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            HOME=str(self.base),
            RABBITMQ_NODENAME=self.node,
            RABBITMQ_NODE_IP_ADDRESS="127.0.0.1",
            RABBITMQ_NODE_PORT=str(self.port),
            RABBITMQ_DIST_PORT=str(self.dist_port),
            ERL_EPMD_PORT=str(self.epmd_port),
            ERL_EPMD_ADDRESS="127.0.0.1",
            RABBITMQ_MNESIA_BASE=str(self.base / "mnesia"),
            RABBITMQ_LOG_BASE=str(self.base / "log"),
            RABBITMQ_CONFIG_FILE=str(self.base / "rabbitmq"),
            RABBITMQ_ADVANCED_CONFIG_FILE=str(self.base / "advanced.config"),
            RABBITMQ_ENABLED_PLUGINS_FILE=str(self.base / "enabled_plugins"),
            RABBITMQ_PID_FILE=str(self.pid_file),
            RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}",
        )
        return env

    def _write_config(self) -> None:
        (self.base / "log").mkdir(exist_ok=True)
        conf = ["loopback_users = none", f"listeners.tcp.default = 127.0.0.1:{self.port}"]
        if self.stream_port:
            conf.append(f"stream.listeners.tcp.default = 127.0.0.1:{self.stream_port}")
        conf.extend(self.extra_config)
        (self.base / "rabbitmq.conf").write_text("\n".join(conf) + "\n")
        (self.base / "advanced.config").write_text(self.advanced_config + "\n")
        (self.base / "enabled_plugins").write_text("[{}].".format(",".join(self.plugins)))

    def start(self, timeout: float = 90.0) -> ThrowawayBroker:
        if not (RABBIT_BIN / "rabbitmq-server").exists():
            raise RuntimeError(f"no rabbitmq-server under {RABBIT_BIN}: apt-get install rabbitmq-server")
        self._write_config()
        try:
            subprocess.run(
                [str(RABBIT_BIN / "rabbitmq-server"), "-detached"], env=self.env(), check=True,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
            self.wait_ready(timeout)
        except BaseException:  # failed, timed out or interrupted: the node may be up without its pid file yet
            self.destroy()
            raise
        return self

    def wait_ready(self, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.pid_file.exists():
                try:
                    with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                        break
                except OSError:
                    pass
            time.sleep(0.2)
        else:
            raise RuntimeError(f"throwaway broker did not open port {self.port}; logs in {self.base}/log")
        self.ctl("await_startup", timeout=timeout)

    def ctl(self, *args: str, timeout: float = 60.0) -> str:
        out = subprocess.run(
            [str(RABBIT_BIN / "rabbitmqctl"), "-n", self.node, *args], env=self.env(),
            capture_output=True, text=True, timeout=timeout,
        )
        if out.returncode != 0:
            raise RuntimeError(f"rabbitmqctl {' '.join(args)} failed: {out.stderr.strip()}")
        return out.stdout

    def stop(self) -> None:
        """Stop the node (its data stays, so :meth:`start` again restarts it)."""
        if self.pid_file.exists():
            try:
                self.ctl("stop", str(self.pid_file), timeout=60)
            except Exception:
                self.kill()

    def kill(self) -> None:
        """SIGKILL the broker's Erlang VM (a crash, not a clean stop)."""
        if self.pid_file.exists():
            try:
                os.kill(int(self.pid_file.read_text().strip()), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
            self.pid_file.unlink(missing_ok=True)

    def epmd_pids(self) -> list[int]:
        """PIDs of the epmd started for this broker: found by the port in its environment."""
        return [pid for pid in processes_with_env(f"ERL_EPMD_PORT={self.epmd_port}") if _comm(pid) == "epmd"]

    def destroy(self) -> None:
        """Stop the node, end what is left of it (a start cut short leaves a node that ``rabbitmqctl stop``
        cannot find by its pid file) and its own epmd, found by their environment, and remove its files."""
        self.stop()
        end_processes(sorted(set(processes_with_env(f"RABBITMQ_PID_FILE={self.pid_file}") + self.epmd_pids())))
        shutil.rmtree(self.base, ignore_errors=True)


def processes_with_env(entry: str, proc: Path = Path("/proc")) -> list[int]:
    """PIDs of the processes (other than this one) whose environment holds ``entry`` (``NAME=value``) exactly: a
    throwaway broker's node and its helpers (``beam.smp``, ``erl_child_setup``, ``epmd``) by its own pid file."""
    wanted = entry.encode()
    pids = []
    for path in proc.iterdir():
        if not path.name.isdigit() or int(path.name) == os.getpid():
            continue
        try:
            if wanted in (path / "environ").read_bytes().split(b"\0"):
                pids.append(int(path.name))
        except OSError:
            continue
    return pids


def end_processes(pids: list[int], wait_s: float = 15.0) -> None:
    """SIGTERM ``pids``, then SIGKILL what is still there after ``wait_s``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait_s
        while pids and time.monotonic() < deadline:
            pids = [pid for pid in pids if Path(f"/proc/{pid}").exists() and not _zombie(pid)]
            time.sleep(0.2)
        if not pids:
            return


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def _docker_answers() -> bool:
    if not shutil.which("docker"):
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=10).returncode == 0
    except Exception:
        return False


def acquire_broker() -> Broker:
    """Find or start a broker (see the module docstring); raise with advice if none."""
    env_uri = os.environ.get("SAFEBUNNY_TEST_AMQP_URI")
    if env_uri:
        if not amqp_answers(env_uri):
            raise RuntimeError("SAFEBUNNY_TEST_AMQP_URI is set but no broker answers there")
        return Broker(env_uri, "SAFEBUNNY_TEST_AMQP_URI", stream_port=_stream_port_env())
    local = "amqp://guest:guest@127.0.0.1:5672/%2F"
    if amqp_answers(local):
        return Broker(local, "the broker already running on 127.0.0.1:5672", stream_port=_probe(5552),
                      ctl=_local_ctl)
    errors = []
    if (RABBIT_BIN / "rabbitmq-server").exists():
        try:
            tb = ThrowawayBroker().start()
            return Broker(tb.uri, f"a throwaway rabbitmq-server on port {tb.port}", tb.stream_port,
                          stop=tb.destroy, ctl=tb.ctl)
        except Exception as exc:  # fall through to the next choice
            errors.append(f"throwaway broker: {exc}")
    if _docker_answers():
        from safebunny.optional import require

        RabbitMqContainer = require(  # noqa: N806 - a class
            "testcontainers.rabbitmq", "start a RabbitMQ container for the tests (a Docker engine answers)",
        ).RabbitMqContainer

        # the stream plugin on, and its port bound 1:1 so the port the broker advertises is the one we reach
        stream_port = free_port()
        container = (RabbitMqContainer("rabbitmq:3.13")
                     .with_bind_ports(5552, stream_port)
                     .with_env("RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS",
                               "-rabbitmq_stream advertised_host 127.0.0.1 "
                               f"-rabbitmq_stream advertised_port {stream_port}")
                     .with_command("bash -c 'rabbitmq-plugins enable --offline rabbitmq_stream && "
                                   "exec docker-entrypoint.sh rabbitmq-server'")
                     .start())
        host, port = container.get_container_host_ip(), container.get_exposed_port(5672)

        def ctl(*args: str, timeout: float = 60.0) -> str:
            code, out = container.exec(["rabbitmqctl", *args])
            if code:
                raise RuntimeError(f"rabbitmqctl {' '.join(args)} failed in the container: {out!r}")
            return out.decode()

        return Broker(f"amqp://guest:guest@{host}:{port}/%2F", "testcontainers' RabbitMQ (with the stream plugin)",
                      stream_port=stream_port, stop=container.stop, ctl=ctl)
    raise RuntimeError(
        "No RabbitMQ broker for the tests: set SAFEBUNNY_TEST_AMQP_URI, start one on 127.0.0.1:5672 "
        "('rabbitmq-server -detached'), install Debian's rabbitmq-server "
        "('apt-get install rabbitmq-server'), or run a Docker engine for testcontainers. "
        + "; ".join(errors)
    )


def _local_ctl(*args: str, timeout: float = 60.0) -> str:
    return subprocess.run(["rabbitmqctl", *args], capture_output=True, text=True, timeout=timeout, check=True).stdout


def acquire_stream_broker(shared: Broker) -> Broker:
    """A broker whose stream plugin answers: ``shared`` when it has one, else a throwaway broker with the
    plugin (the machine's own RabbitMQ starts without it, and the tests do not change its plugins)."""
    if shared.stream_port and _probe(shared.stream_port, host=_host(shared.uri)):
        return shared
    if (RABBIT_BIN / "rabbitmq-server").exists():
        tb = ThrowawayBroker(plugins=("rabbitmq_stream",)).start()
        return Broker(tb.uri, f"a throwaway rabbitmq-server with the stream plugin on ports {tb.port}/{tb.stream_port}"
                      f" ({shared.origin} has no stream plugin)", tb.stream_port, stop=tb.destroy, ctl=tb.ctl)
    raise RuntimeError(
        f"The stream tests need the stream plugin, which {shared.origin} lacks, and no rabbitmq-server is installed "
        "to start one with it: 'rabbitmq-plugins enable rabbitmq_stream' on the broker, or 'apt-get install "
        "rabbitmq-server', or set SAFEBUNNY_TEST_AMQP_URI and SAFEBUNNY_TEST_STREAM_PORT to a broker that has it.")


def _host(uri: str) -> str:
    from urllib.parse import urlsplit

    return urlsplit(uri).hostname or "127.0.0.1"


def _probe(port: int, host: str = "127.0.0.1") -> int | None:
    try:
        with socket.create_connection((host, port), timeout=1):
            return port
    except OSError:
        return None


def _stream_port_env() -> int | None:
    value = os.environ.get("SAFEBUNNY_TEST_STREAM_PORT")
    return int(value) if value else None
