"""Queue counts from RabbitMQ's management HTTP API (``rabbitmq_management``), which AMQP cannot give.

A passive declare tells a queue's ready messages and consumers, not ``messages_unacknowledged``; the
management API does, sampled by the broker (docs/operations.md: the plugin, the URL, the sampling lag).
:func:`queue_counts` never raises for an unreachable or refusing API: it returns no counts and a note
saying why, with the URL but never the password. Standard library only (``urllib``).
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import quote

from safebunny.amqp.connection import StreamEndpoint

__all__ = ["management_url_for", "queue_counts"]

DEFAULT_PORT = 15672


@dataclass(frozen=True)
class QueueCounts:
    """A queue's messages as the management API counts them."""

    ready: int
    unacked: int
    #: epoch seconds of the ``timestamp`` property of the message at the queue's head (None: empty, not stamped,
    #: or a queue type that does not say); how long the oldest waiting message has waited
    head_timestamp: int | None = None


def management_url_for(amqp_uri: str) -> str:
    """The management API's usual address for a broker: the AMQP host on port 15672 (``https`` for ``amqps``)."""
    endpoint = StreamEndpoint.from_uri(amqp_uri)
    host = f"[{endpoint.host}]" if ":" in endpoint.host else endpoint.host
    return f"{'https' if endpoint.tls else 'http'}://{host}:{DEFAULT_PORT}"


def queue_counts(amqp_uri: str, names: Sequence[str], password: str | None = None, url: str | None = None,
                 timeout: float = 2.0) -> tuple[dict[str, QueueCounts] | None, str | None]:
    """``({queue: QueueCounts}, None)`` for the ``names`` that exist in the URI's vhost, or ``(None, note)``
    when the management API at ``url`` (default :func:`management_url_for`) does not answer or refuses.
    The login is the AMQP URI's user (or ``password``); it needs the ``monitoring`` or ``management`` tag."""
    base = (url or management_url_for(amqp_uri)).rstrip("/")
    login = StreamEndpoint.from_uri(amqp_uri)
    user, secret = login.username, login.password if password is None else password
    request = urllib.request.Request(
        f"{base}/api/queues/{quote(login.vhost, safe='')}"
        "?columns=name,messages_ready,messages_unacknowledged,head_message_timestamp",
        headers={"Authorization": "Basic " + base64.b64encode(f"{user}:{secret}".encode()).decode()})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - http(s) only
            listed = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            return None, (f"unacked unknown: the management API at {base} refused user {user!r} (HTTP {exc.code}); "
                          "give it the 'monitoring' tag")
        return None, f"unacked unknown: the management API at {base} answered HTTP {exc.code}"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return None, (f"unacked unknown: no management API at {base} ({reason}); enable the plugin "
                      "('rabbitmq-plugins enable rabbitmq_management') or give SagaSettings(management_url=...)")
    wanted = set(names)
    return {q["name"]: QueueCounts(int(q.get("messages_ready") or 0), int(q.get("messages_unacknowledged") or 0),
                                   q["head_message_timestamp"] if isinstance(q.get("head_message_timestamp"), int)
                                   else None)
            for q in listed if isinstance(q, dict) and q.get("name") in wanted}, None
