"""Test helpers (also used by the benchmarks that serve): a free loopback port, waiting for /readyz, stopping, an
idle client; `cone serve` started and stopped around a block, one request timed, a process's resident memory."""

from __future__ import annotations

import http.client
import json
import os
import resource
import secrets
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url: str, timeout: float = 300) -> None:
    """Poll ``url``/readyz until it answers 200 (every index loaded); TimeoutError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/readyz", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:  # not listening yet, or 503 while the indexes load
            pass
        time.sleep(0.1)
    raise TimeoutError(f"service at {url} not ready after {timeout:.0f} s")


def stop(server: subprocess.Popen, grace: float = 30) -> None:
    """SIGTERM, then SIGKILL if the server has not left within ``grace`` seconds."""
    server.terminate()
    try:
        server.wait(grace)
    except subprocess.TimeoutExpired:
        server.kill()


def hold_idle(port: int, stop: threading.Event, opened: list[int]) -> None:
    """One idle client: connect, send nothing, and connect again as soon as the server closes it (its 408)."""
    while not stop.is_set():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
                opened.append(1)
                while not stop.is_set():
                    try:
                        if not conn.recv(4096):  # closed by the server
                            break
                    except TimeoutError:
                        continue
        except OSError:
            time.sleep(0.01)


@dataclass(frozen=True)
class Served:
    """A `cone serve` on loopback: its process, port and admin key, and the models it answers for."""

    process: subprocess.Popen
    port: int
    key: str
    models: list[str]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@contextmanager
def served(indexes: Path, checkpoints: Path | None = None, nofile: int | None = None) -> Iterator[Served]:
    """`cone serve --indexes INDEXES` in a subprocess on a free loopback port with an admin key (and under a
    descriptor limit of ``nofile``, its `ulimit -n`, where given), yielded once ready, stopped on leaving."""
    port, key = free_port(), secrets.token_hex(16)
    command = [sys.executable, "-m", "cone", "serve", "--indexes", str(indexes), "--port", str(port)]
    command += ["--checkpoints", str(checkpoints)] if checkpoints else []

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    env = {**os.environ, "CONE_ADMIN_KEY": key}
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=limit if nofile else None
    )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_ready(url, timeout=600)
        with urllib.request.urlopen(url + "/models", timeout=60) as response:
            models = [m["name"] for m in json.loads(response.read())["models"] if m["available"]]
        yield Served(process, port, key, models)
    finally:
        stop(process)


def timed_request(
    port: int, method: str, path: str, headers: dict | None = None, timeout: float = 60
) -> tuple[float, int | None]:
    """One request on a fresh loopback connection: its seconds and status (None: no answer within ``timeout``)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    start = time.perf_counter()
    try:
        connection.request(method, path, headers=headers or {})
        response = connection.getresponse()
        response.read()
        status = response.status
    except (OSError, http.client.HTTPException):
        status = None
    finally:
        connection.close()
    return time.perf_counter() - start, status


def rss_mib(pid: int) -> float:
    """A process's resident memory now (VmRSS), in MiB."""
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:")) / 1024
