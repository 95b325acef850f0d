"""The layering the README promises, read from the code's own imports: libraries never import the entry layer,
the base imports no library, and the data's path runs one way (no library imports one above it)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Bottom to top: each folder may import only the base and the folders before it (and itself).
LAYERS = [
    "cone", "checkpoints", "data", "geometry", "models", "encoders", "indexing", "eval", "service", "pipeline", "cli"
]  # fmt: skip
PACKAGE = {folder: "cone" if folder == "cone" else f"cone.{folder}" for folder in LAYERS}
UP_ON_PURPOSE = {("cone/__main__.py", "cli")}  # `python -m cone` must reach the command line; explained there


def imported_folders(path: Path) -> set[str]:
    """The repository folders a module imports (by their `cone.X` names)."""
    folders = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "cone" and len(parts) > 1 and parts[1] in PACKAGE:
                folders.add(parts[1])
            elif parts[0] == "cone":
                folders.add("cone")
    return folders


@pytest.mark.parametrize("folder", LAYERS)
def test_imports_only_go_down(folder):
    allowed = set(LAYERS[: LAYERS.index(folder) + 1]) | {"cone"}
    if folder == "service":
        allowed.discard("eval")  # eval and service stand side by side on the index: neither imports the other
    for path in sorted((ROOT / folder).glob("*.py")):
        where = path.relative_to(ROOT).as_posix()
        upward = {f for f in imported_folders(path) - allowed if (where, f) not in UP_ON_PURPOSE}
        assert not upward, f"{where} imports {sorted(upward)}, above its layer"


def test_the_base_imports_nothing_of_the_project_but_itself():
    for path in sorted((ROOT / "cone").glob("*.py")):
        where = path.relative_to(ROOT).as_posix()
        assert imported_folders(path) - {"cone"} <= {f for w, f in UP_ON_PURPOSE if w == where}, where
