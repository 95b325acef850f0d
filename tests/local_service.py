"""Test helpers (also used by the benchmarks that serve): a free loopback port, waiting for /readyz, stopping, an
idle client."""

from __future__ import annotations

import socket
import subprocess
import threading
import time
import urllib.request


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
