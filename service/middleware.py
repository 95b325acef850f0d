"""ASGI middleware every answer goes through: security headers, HEAD wherever GET is, and query text that must be
UTF-8 (as a POSTed query must be valid Unicode), so that no route takes bytes a browser could not have sent."""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path
from urllib.parse import unquote_to_bytes

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from cone.service.limits import json_response, short

# What a JSON or PNG answer may load: nothing; and no page may frame any answer (clickjacking).
API_POLICY = "default-src 'none'; frame-ancestors 'none'"
# FastAPI's /docs and /redoc pages load Swagger UI / ReDoc from a public CDN and configure it with an inline
# script (README, "Reliability"): allowed there only; `cone serve --no-docs` turns those pages off.
CDN = "https://cdn.jsdelivr.net"
DOCS_POLICY = (
    f"default-src 'self'; script-src 'self' 'unsafe-inline' {CDN}; style-src 'self' 'unsafe-inline' {CDN}; "
    "img-src 'self' data: https://fastapi.tiangolo.com; worker-src blob:; frame-ancestors 'none'"
)
DOCS_PATHS = ("/docs", "/docs/oauth2-redirect", "/redoc")


def page_policy(page: Path) -> str:
    """The page's CSP: its one inline script and style allowed by their hashes (not 'unsafe-inline', which would
    let an injected script run too), its fetches and images from this origin only."""

    def hashes(tag: str) -> str:
        bodies = re.findall(rf"<{tag}>(.*?)</{tag}>", page.read_text(encoding="utf-8"), flags=re.DOTALL)
        digests = (base64.b64encode(hashlib.sha256(b.encode()).digest()).decode() for b in bodies)
        return " ".join(f"'sha256-{d}'" for d in digests) or "'none'"

    return (
        f"default-src 'none'; script-src {hashes('script')}; style-src {hashes('style')}; img-src 'self'; "
        "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    )


class SecurityHeaders:
    """nosniff, no framing, and a Content-Security-Policy on every answer: the page's own (``page_policy``), the
    API docs' (``DOCS_POLICY``), or nothing-to-load for the API's JSON and PNG."""

    def __init__(self, app: ASGIApp, page: Path) -> None:
        self.app, self.page = app, page_policy(page)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        policy = self.page if path == "/" else DOCS_POLICY if path in DOCS_PATHS else API_POLICY
        added = [
            (b"x-content-type-options", b"nosniff"),
            (b"x-frame-options", b"DENY"),
            (b"content-security-policy", policy.encode()),
            (b"referrer-policy", b"no-referrer"),
        ]

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *added]}
            await send(message)

        await self.app(scope, receive, with_headers)


class HeadAsGet:
    """HEAD answered wherever GET is (FastAPI's routes take only the methods they name): the GET runs, its
    headers go out, its body does not."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return

        async def headers_only(message: Message) -> None:
            if message["type"] == "http.response.body":
                message = {**message, "body": b""}
            await send(message)

        await self.app({**scope, "method": "GET"}, receive, headers_only)


class Utf8Query:
    """A query string's values must be UTF-8 once percent-decoded: Starlette would decode ``%FF`` to U+FFFD and
    search for that, while a POSTed lone surrogate is refused. One rule for both: text that is not valid Unicode
    is a 422 naming the parameter."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and (bad := invalid_query_parameter(scope.get("query_string", b""))):
            name, raw = bad
            detail = [
                {
                    "loc": ["query", name],
                    "msg": "not valid UTF-8 text once percent-decoded",
                    "type": "unicode_invalid",
                    "input": short(raw),
                }
            ]
            await json_response({"detail": detail}, 422)(scope, receive, send)
            return
        await self.app(scope, receive, send)


def invalid_query_parameter(query: bytes) -> tuple[str, bytes] | None:
    """The first (name, raw value) of ``query`` whose name or value is not UTF-8; None if all are."""
    for part in query.split(b"&"):
        name, _, value = part.partition(b"=")
        try:
            decoded_name = unquote_to_bytes(name.replace(b"+", b" ")).decode("utf-8")
        except UnicodeDecodeError:
            return name.decode("latin-1"), name
        try:
            unquote_to_bytes(value.replace(b"+", b" ")).decode("utf-8")
        except UnicodeDecodeError:
            return decoded_name, value
    return None
