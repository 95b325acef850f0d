"""Bounds on connections, which uvicorn leaves open: a deadline for receiving a whole request, and a cap on
connections held at once.

Why a protocol class and not uvicorn's settings: ``timeout_keep_alive`` only runs between a response and the
next request and is cancelled by the first byte received, so a connection that never sends a request (or sends
a byte now and then) is held forever; ``limit_concurrency`` answers 503 to requests over it but has accepted their
connections first, so idle sockets still use up the process's descriptors until ``accept`` fails (EMFILE) and
nothing, /healthz included, is answered. Here each connection must deliver a complete request (head and body)
within ``request_timeout`` of being accepted or of its previous response, else it is answered 408 and closed;
and a connection over ``max_connections`` is answered 503 and closed at once, which gives its descriptor back.
"""

from __future__ import annotations

import asyncio
import json
import resource

from uvicorn.protocols.http.h11_impl import H11Protocol

REQUEST_TIMEOUT_ENV = "CONE_REQUEST_TIMEOUT"
MAX_CONNECTIONS_ENV = "CONE_MAX_CONNECTIONS"
DEFAULT_REQUEST_TIMEOUT = 10.0  # seconds to send a whole request; a slow client over a bad link still makes it


def _descriptor_limit() -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return 1 << 16 if soft == resource.RLIM_INFINITY else soft


def default_max_connections() -> int:
    """A quarter of the process's descriptor limit, at most 1,000. Another quarter is for ``accept_backlog``:
    asyncio accepts up to the backlog's count of connections in one go, before any of them can be refused, so
    the connections held, the ones being refused and the indexes' files must fit in the limit together."""
    return max(1, min(1000, _descriptor_limit() // 4))


def accept_backlog() -> int:
    """The listen backlog (uvicorn's default 2,048), at most a quarter of the descriptor limit: see above."""
    return max(16, min(2048, _descriptor_limit() // 4))


def _answer(status: str, text: str) -> bytes:
    body = json.dumps({"detail": text}).encode()
    head = f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
    return (head + "connection: close\r\n\r\n").encode() + body


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with the deadline and the cap above (set by ``guarded_protocol``)."""

    request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    max_connections: int = 1000

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._deadline: asyncio.TimerHandle | None = None
        if len(self.connections) > self.max_connections:
            transport.write(_answer("503 Service Unavailable", f"over {self.max_connections} connections"))
            transport.close()
            return
        self._arm()

    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(self.request_timeout, self._timed_out)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def handle_events(self) -> None:
        super().handle_events()
        cycle = self.cycle
        if cycle is not None and not cycle.more_body and not cycle.response_complete:
            self._disarm()  # the whole request is in: from here the app, not the client, holds the connection

    def on_response_complete(self) -> None:
        self._arm()  # the next request has its own deadline (before super(): it may handle a pipelined one)
        super().on_response_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _timed_out(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        if self.cycle is None or self.cycle.response_complete:  # no request begun: nothing else will answer
            self.transport.write(_answer("408 Request Timeout", f"no whole request within {self.request_timeout:g} s"))
        self.transport.close()  # a request begun but not finished: its app sees the disconnect


def guarded_protocol(request_timeout: float, max_connections: int) -> type[GuardedH11Protocol]:
    """The protocol class to give uvicorn (``http=``), with these bounds."""
    return type(
        "GuardedH11Protocol",
        (GuardedH11Protocol,),
        {"request_timeout": request_timeout, "max_connections": max_connections},
    )
