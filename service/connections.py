"""Bounds on connections, which uvicorn leaves open: a deadline for receiving a whole request, and a cap on
connections held at once.

Why a protocol class and not uvicorn's settings: ``timeout_keep_alive`` only runs between a response and the
next request and is cancelled by the first byte received, so a connection that never sends a request (or sends
a byte now and then) is held forever; ``limit_concurrency`` answers 503 to requests over it but has accepted their
connections first, so idle sockets still use up the process's descriptors until ``accept`` fails (EMFILE) and
nothing, /healthz included, is answered. Here each connection must deliver a complete request (head and body)
within ``request_timeout`` of being accepted or of its previous response, else it is answered 408 and closed;
and at most ``max_connections`` are held at once (with the few more one accept batch can bring, below).

The cap alone hands the whole budget to whoever holds it: a few dozen idle sockets, reopened as they are closed,
kept every other client (the health check included) refused (issue 40). So the cap is kept as a queue, not a
refusal, and idle holders are drained as it nears:

- At the cap the server stops accepting (``AcceptGate``): newcomers wait in the kernel's listen queue, in the order
  they connected and holding no descriptor of ours, and are accepted as connections close. A refusal would send
  an idle client straight back to reconnect, ahead of a health check arriving once; the queue is first come, first
  served. (Go's ``netutil.LimitListener`` blocks ``Accept`` the same way; nginx stops accepting when its
  ``worker_connections`` run short.)
- Past three quarters of the cap (``pressure``), a connection with no request begun has ``PRESSURE_IDLE`` seconds
  (idle between requests) or ``PRESSURE_FIRST_BYTE`` (just accepted: nothing sent yet), not ``request_timeout``, to
  send its first byte, and the idle ones already held are put on that deadline at once (those idle longer are
  closed: 408). A client that sends its
  request keeps the whole ``request_timeout`` for it, from when it went idle. (nginx likewise closes its idle
  keep-alive connections when it runs out of connections.) So the queue moves a cap's worth of idle holders every
  ``PRESSURE_FIRST_BYTE`` seconds, and a request waits about that long per cap of holders ahead of it.
- No bound per peer address: behind a proxy or a NAT every client is one peer, and a loopback attacker is the
  health check's own address; the deadlines above bound what any peer holds.
"""

from __future__ import annotations

import asyncio
import json
import resource

from uvicorn.protocols.http.h11_impl import H11Protocol

REQUEST_TIMEOUT_ENV = "CONE_REQUEST_TIMEOUT"
MAX_CONNECTIONS_ENV = "CONE_MAX_CONNECTIONS"
DEFAULT_REQUEST_TIMEOUT = 10.0  # seconds to send a whole request; a slow client over a bad link still makes it
PRESSURE_IDLE = 1.0  # seconds an idle connection has to begin a request once the connections pass PRESSURE_SHARE
# ... and a connection that has sent nothing since it was accepted: a client sends its request with the handshake (one
# that waited in the listen queue has it there already), so only a holder of a socket waits longer than this. 1 s
# here moved a queue of 136 idle reconnecting sockets past a cap of 64 one cap a second: 2-4 s for a health check.
PRESSURE_FIRST_BYTE = 0.2
PRESSURE_SHARE = 0.75  # of the cap


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


class AcceptGate:
    """Stop and restart accepting on a listening asyncio server: at the cap, newcomers wait in the kernel's listen
    queue. Uses asyncio's own ``Server._start_serving`` (what ``start_serving`` runs) to resume; a server without
    it (another event loop) is never paused, and over-cap connections are then refused as before."""

    def __init__(self, server: asyncio.AbstractServer | None, loop: asyncio.AbstractEventLoop) -> None:
        self.server, self.loop = server, loop

    @property
    def usable(self) -> bool:
        return hasattr(self.server, "_start_serving") and bool(getattr(self.server, "sockets", ()))

    def pause(self) -> None:
        if self.usable and self.server.is_serving():
            for sock in self.server.sockets:
                self.loop.remove_reader(sock.fileno())
            self.server._serving = False  # what _start_serving checks before adding the readers back

    def resume(self) -> None:
        if self.usable and not self.server.is_serving():  # not once closed: its sockets are gone then
            self.server._start_serving()


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with the deadline, the cap and its queue above (set by ``guarded_protocol``)."""

    request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    max_connections: int = 1000

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._deadline: asyncio.TimerHandle | None = None
        self._idle_since: float | None = None  # when it last had no request begun; None while one is coming in
        self._short = False  # its deadline is the short one of pressure
        self._fresh = True  # nothing received since it was accepted
        self._gate = AcceptGate(getattr(transport, "_server", None), self.loop)  # asyncio's transports keep it
        held = len(self.connections)
        if held >= self.max_connections:
            self._gate.pause()  # the next ones wait in the listen queue until a connection closes
        # Over the cap: accepted in the same batch as the one that filled it (asyncio accepts up to the backlog's
        # count at once, before any is seen here). Held when the gate works: a batch is bounded by the backlog,
        # and refusing sends its idle holders straight back ahead of the queue. Refused where it cannot pause.
        if held > self.max_connections and not self._gate.usable:
            transport.write(_answer("503 Service Unavailable", f"over {self.max_connections} connections"))
            transport.close()
            return
        self._go_idle()
        if held == int(PRESSURE_SHARE * self.max_connections) + 1:  # pressure begins (counts move one at a time)
            self._drain_idle()  # later idlers get the short deadline as they go idle: one sweep, not one per accept

    def _pressure(self) -> bool:
        return len(self.connections) > PRESSURE_SHARE * self.max_connections

    def _idle_limit(self) -> float:
        return min(PRESSURE_FIRST_BYTE if self._fresh else PRESSURE_IDLE, self.request_timeout)

    def _go_idle(self) -> None:
        """No request begun: its deadline runs from now, short under pressure."""
        self._idle_since = self.loop.time()
        self._short = self._pressure()
        self._arm(self._idle_since + (self._idle_limit() if self._short else self.request_timeout))

    def _drain_idle(self) -> None:
        """Put every idle connection still on the long deadline on the short one (from when it went idle)."""
        for other in list(self.connections):
            if isinstance(other, GuardedH11Protocol) and other._idle_since is not None and not other._short:
                other._short = True
                other._arm(other._idle_since + other._idle_limit())

    def _arm(self, at: float) -> None:
        self._disarm()
        self._deadline = self.loop.call_at(at, self._timed_out)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def data_received(self, data: bytes) -> None:
        self._fresh = self._fresh and not data
        if data and self._idle_since is not None:  # a request begins: the whole of it is due by the long deadline
            since, self._idle_since = self._idle_since, None
            if self._short:
                self._short = False
                self._arm(since + self.request_timeout)
        super().data_received(data)

    def handle_events(self) -> None:
        super().handle_events()
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            self._idle_since = None  # a request (perhaps a pipelined one, never passed to data_received) is in
            if not cycle.more_body:
                self._disarm()  # the whole request is in: from here the app, not the client, holds the connection

    def on_response_complete(self) -> None:
        self._go_idle()  # the next request has its own deadline (before super(): it may handle a pipelined one)
        super().on_response_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._idle_since = None
        super().connection_lost(exc)
        if len(self.connections) < self.max_connections:
            self._gate.resume()

    def _timed_out(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        if self.cycle is None or self.cycle.response_complete:  # no request begun: nothing else will answer
            limit = self._idle_limit() if self._short else self.request_timeout
            self.transport.write(_answer("408 Request Timeout", f"no whole request within {limit:g} s"))
        self.transport.close()  # a request begun but not finished: its app sees the disconnect


def guarded_protocol(request_timeout: float, max_connections: int) -> type[GuardedH11Protocol]:
    """The protocol class to give uvicorn (``http=``), with these bounds."""
    return type(
        "GuardedH11Protocol",
        (GuardedH11Protocol,),
        {"request_timeout": request_timeout, "max_connections": max_connections},
    )
