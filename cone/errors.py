"""The one error hierarchy. Libraries raise these; ``cone``'s ``main`` turns one into a single line on
stderr and its ``exit_code`` (the codes are listed in ``cone --help``)."""

from __future__ import annotations


class ConeError(Exception):
    """A user-facing failure, reported as one line without a traceback."""

    exit_code = 2
    label = "error"  # cone: <label>: <message>


class InputError(ConeError):
    """What the user gave cannot be used: an argument, a file, a dataset, an array (wrong shape, NaN, ...)."""


class DamagedIndex(ConeError):
    """An index folder that cannot serve as it is: damaged files, or built by other weights or on another
    corpus. Rebuilding it (``cone index``; ``cone eval`` does so by itself) is the fix."""


class ModelUnavailable(ConeError):
    """The model's weights are not here. Carries the reason and the command that fixes it."""

    exit_code = 3

    def __init__(self, name: str, reason: str, fix: str) -> None:
        self.name, self.reason, self.fix = name, reason, fix
        super().__init__(f"model {name!r} unavailable: {self.explanation}")

    @property
    def explanation(self) -> str:
        """The reason and its fix, in one line."""
        return f"{self.reason} (to make it available: {self.fix})"


class ClusterError(ConeError):
    """The Ray cluster failed the work: unreachable, or a task failed past its retries. Nothing was written."""

    exit_code = 4
    label = "cluster"


class StoreUnavailable(ConeError):
    """A store whose data lives in a server could not be reached (refused, timed out, the connection dropped): a
    transient failure, not a damaged index. The service answers 503 for that index alone and tries again; nothing
    is written or dropped. The message names the server by host, database and table only, never its password."""

    exit_code = 5
    label = "unavailable"


class Interrupted(ConeError):
    """Ctrl-C, after whatever could be saved was saved; the message says what was kept. ``still_running``: work that
    writes no index (the demo's eval) goes on in native code on another thread, so the process leaves without its
    shutdown; a report it was writing may be left half-written, and the next run writes it again."""

    exit_code = 130
    label = "interrupted"

    def __init__(self, message: str = "", still_running: bool = False) -> None:
        super().__init__(message)
        self.still_running = still_running


EXIT_CODES = {
    0: "success",
    InputError.exit_code: "bad input: an argument, file, dataset or index that cannot be used",
    ModelUnavailable.exit_code: "a model's weights are not on this machine (the message says how to get them)",
    ClusterError.exit_code: "the Ray cluster failed (unreachable, or a task failed past its retries)",
    StoreUnavailable.exit_code: "a store's server could not be reached (refused, timed out); try again",
    Interrupted.exit_code: "interrupted (Ctrl-C)",
}
