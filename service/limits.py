"""Bounds on what a request can make the service hold or send back: body size, and echoed input."""

from __future__ import annotations

import json
import re

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

ECHO_CHARS = 40  # an error message quotes at most this much of what was sent


def short(value: object) -> str:
    """``repr`` of an input, cut to ECHO_CHARS: ASCII-safe (surrogates escaped), never the whole input back."""
    text = ascii(value)
    return text if len(text) <= ECHO_CHARS else text[:ECHO_CHARS] + "..."


LINE_BREAKS = re.compile(r"[\x00-\x1f\x7f\x85\u2028\u2029]")


def one_line(text: str) -> str:
    """``text`` with line breaks and other control characters escaped (``\\n``): a refusal, or a reason read
    from a file or a folder's name, is always one line of a log or a client's message."""
    return LINE_BREAKS.sub(lambda m: ascii(m.group())[1:-1], text)


def json_response(payload: object, status_code: int) -> Response:
    # ensure_ascii escapes lone surrogates; allow_nan=False: the body is always valid JSON.
    body = json.dumps(payload, ensure_ascii=True, allow_nan=False)
    return Response(body, status_code=status_code, media_type="application/json")


async def validation_error(request: Request, exc: RequestValidationError) -> Response:
    """FastAPI's 422 body, with each offending input quoted short and safe (NaN, 1e400, "\\ud800", 100 MB)."""
    detail = [
        {
            "loc": [x if isinstance(x, int) else short(x)[1:-1] for x in e["loc"]],
            "msg": e["msg"][:200],
            "type": e["type"],
            "input": short(e.get("input")),
        }
        for e in exc.errors()
    ]
    return json_response({"detail": detail}, 422)


class BodyLimit:
    """ASGI middleware: a body over ``max_bytes`` is answered 413, before reading it when Content-Length says
    so, else as soon as the bytes received pass the limit (a chunked upload): the app then sees the body end
    there, and its answer is replaced by the 413."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length", b"0")
        if not length.isdigit() or int(length) > self.max_bytes:
            await self._too_large(send)
            return
        received, too_large, started = 0, False, False

        async def limited_receive() -> Message:
            nonlocal received, too_large
            if too_large:
                return {"type": "http.disconnect"}
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.max_bytes:
                too_large = True  # nothing past the limit reaches the app
                return {"type": "http.request", "body": b"", "more_body": False}
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if not too_large or started:  # an answer begun before the limit was passed is let through
                started = started or message["type"] == "http.response.start"
                await send(message)

        await self.app(scope, limited_receive, guarded_send)
        if too_large and not started:
            await self._too_large(send)

    async def _too_large(self, send: Send) -> None:
        body = json.dumps({"detail": f"request body over {self.max_bytes:,} bytes"}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": body})
