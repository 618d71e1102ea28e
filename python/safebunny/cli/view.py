"""``safebunny view <saga> [--port N] [--host H] [--refresh SECONDS] [--allow-actions] [--once [--out FILE]]``:
the saga page (``saga.view()``) served on a local port, with its data as JSON beside it, or written once.

``GET /`` (``?instance=ID`` adds that instance's trace) is the page, reloading itself every ``--refresh``
seconds; ``GET /status.json`` the data it is built from. Read-only unless ``--allow-actions``: then
``POST /actions/redrive`` and ``POST /actions/discard`` (JSON ``{"step", "id", "reason"}``) redrive or discard one
parked message through the same functions as ``safebunny poison redrive|discard``, and only with the token the
page carries (a page of another site cannot post here). Binds to 127.0.0.1 unless ``--host`` says otherwise.
"""

from __future__ import annotations

import argparse
import secrets
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

import orjson

from safebunny.cli import access, exits
from safebunny.cli.exits import CliError
from safebunny.errors import SafeBunnyError
from safebunny.uri import redact

if TYPE_CHECKING:
    from safebunny.saga.saga import Saga

__all__ = ["ViewServer"]

#: the largest request body an action may carry
_MAX_BODY = 64 * 1024


class ViewServer:
    """The page server for ``saga``: :meth:`start` serves it from a thread (``url`` once started), :meth:`stop`
    ends it. ``actions``: accept redrive and discard from the page."""

    def __init__(self, saga: Saga, host: str = "127.0.0.1", port: int = 8765, refresh_s: float = 10.0,
                 actions: bool = False) -> None:
        self.saga, self.refresh_s, self.actions = saga, refresh_s, actions
        self.token = secrets.token_urlsafe(24)
        self._lock = threading.Lock()  # one gather at a time: each opens broker connections and reads tables
        self._server = ThreadingHTTPServer((host, port), self._handler())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/"

    def start(self) -> ViewServer:
        self._thread = threading.Thread(target=self._server.serve_forever, name="safebunny-view", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self._server.serve_forever()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def page(self, instance: str | None) -> str:
        from safebunny.saga.look.view import view

        with self._lock:
            return str(view(self.saga, instance, self.actions, self.refresh_s, self.token, served=True))

    def data(self, instance: str | None) -> dict[str, Any]:
        from safebunny.saga.look.view import gather

        with self._lock:
            return gather(self.saga, instance)

    def act(self, kind: str, request: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """Redrive or discard one parked message (``kind``), as ``safebunny poison redrive|discard --id`` does."""
        step_label, mid, reason = request.get("step"), request.get("id"), request.get("reason")
        if not isinstance(step_label, str) or not isinstance(mid, str) or not mid:
            return 400, {"ok": False, "message": "an action needs 'step' and 'id'"}
        try:
            step = access.select_steps(self.saga, step_label)[0]
            with self._lock:
                if kind == "redrive":
                    done = access.redrive(self.saga, step, [mid])
                    message = f"redrove {done} message(s) of step {step.label}" if done else "nothing to redrive"
                else:
                    done = access.discard(self.saga, step, [mid], str(reason or ""))
                    message = (f"discarded {done} message(s) of step {step.label}" if done
                               else "no parked message with that id")
        except (CliError, SafeBunnyError) as exc:
            return 409, {"ok": False, "message": redact(str(exc))}
        return 200, {"ok": bool(done), "message": message, "count": done}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
                return None  # quiet: a page reloads every few seconds

            def _send(self, code: int, body: bytes, kind: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.send_header("X-Content-Type-Options", "nosniff")
                self.end_headers()
                self.wfile.write(body)

            def _json(self, code: int, value: Any) -> None:
                self._send(code, orjson.dumps(value, default=str), "application/json")

            def do_GET(self) -> None:  # noqa: N802 - the base class's name
                url = urlsplit(self.path)
                instance = (parse_qs(url.query).get("instance") or [None])[0] or None
                try:
                    if url.path == "/":
                        self._send(200, server.page(instance).encode("utf-8"), "text/html; charset=utf-8")
                    elif url.path == "/status.json":
                        self._json(200, server.data(instance))
                    else:
                        self._json(404, {"ok": False, "message": "not found: / and /status.json"})
                except SafeBunnyError as exc:
                    self._json(503, {"ok": False, "message": redact(str(exc))})

            def do_POST(self) -> None:  # noqa: N802
                kind = urlsplit(self.path).path.removeprefix("/actions/")
                if kind not in ("redrive", "discard") or not self.path.startswith("/actions/"):
                    return self._json(404, {"ok": False, "message": "not found"})
                if not server.actions:
                    return self._json(403, {"ok": False, "message": "read-only: start safebunny view with "
                                                                    "--allow-actions to redrive or discard"})
                if not secrets.compare_digest(self.headers.get("X-SafeBunny-Token", ""), server.token):
                    return self._json(403, {"ok": False, "message": "missing or wrong token: reload the page"})
                length = int(self.headers.get("Content-Length") or 0)
                if length > _MAX_BODY:
                    return self._json(413, {"ok": False, "message": "request too large"})
                try:
                    request = orjson.loads(self.rfile.read(length) or b"{}")
                except orjson.JSONDecodeError:
                    return self._json(400, {"ok": False, "message": "the body must be JSON"})
                self._json(*server.act(kind, request if isinstance(request, dict) else {}))
                return None

        return Handler


def _once(args: argparse.Namespace, saga: Saga) -> int:
    """``--once``: the page written once (``--out FILE``, else stdout), as ``saga.view()`` makes it; exit 1 with
    the saga's problems on stderr (as ``safebunny status`` says them) when it is not declared or has no state."""
    from safebunny.saga.look.view import view

    page = view(saga)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as out:
            out.write(str(page))
    else:
        sys.stdout.write(str(page))
    for problem in page.data.get("problems") or []:
        print(f"safebunny: {problem}", file=sys.stderr)
    return exits.NOT_FOUND if page.data.get("problems") else exits.OK


def _view(args: argparse.Namespace, saga: Saga) -> int:
    if args.once:
        return _once(args, saga)
    server = ViewServer(saga, args.host, args.port, args.refresh, args.allow_actions)
    mode = "redrive and discard allowed (each asks for confirmation)" if args.allow_actions else "read-only"
    print(f"serving saga {saga.name!r} at {server.url} ({mode}; data at {server.url}status.json); Ctrl-C stops",
          flush=True)
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"warning: listening on {args.host}: anyone who reaches this port sees the saga's messages' reasons "
              "and ids", file=sys.stderr)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


def add_parsers(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """Add ``view``."""
    from safebunny.cli.status import positive_seconds

    view = sub.add_parser("view", parents=[common],
                          help="serve the saga's page (graph, steps, instances, poison) on a local port")
    view.add_argument("--port", type=int, default=8765, help="port (default 8765; 0: any free port)")
    view.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    view.add_argument("--refresh", type=positive_seconds, default=10.0, metavar="SECONDS",
                      help="the page reloads itself this often (default 10)")
    view.add_argument("--allow-actions", action="store_true",
                      help="let the page redrive and discard parked messages (each asks for confirmation)")
    view.add_argument("--once", action="store_true",
                      help="write the page once (to --out, else stdout) and exit: 1 when the saga is not declared "
                           "or its root holds no state (what 'safebunny status' warns of)")
    view.add_argument("--out", metavar="FILE", help="with --once: write the page to FILE")
    view.set_defaults(run=_view)
