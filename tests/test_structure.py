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


def absolute(module: str | None, level: int, package: str) -> str:
    """The absolute name of ``from <level dots><module> import``'s module, in a module of ``package``."""
    if not level:
        return module or ""
    base = package.split(".")[: len(package.split(".")) - level + 1]
    return ".".join(base + ([module] if module else []))


def imported_folders(path: Path) -> set[str]:
    """The repository folders a module imports (by their `cone.X` names, a relative import resolved to one)."""
    package = PACKAGE[path.parent.name]
    folders = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom):
            module = absolute(node.module, node.level, package)
            names = [module] + [f"{module}.{a.name}" for a in node.names]
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


@pytest.mark.parametrize(
    ("source", "folder", "folders"),
    [
        ("from cone.cli import main", "eval", {"cli"}),
        ("from ..cli import main", "eval", {"cli"}),
        ("from .. import cli", "eval", {"cone", "cli"}),
        ("from . import metrics", "eval", {"eval"}),
        ("from .metrics import ndcg", "eval", {"eval"}),
        ("from ..errors import InputError", "eval", {"cone"}),
        ("from .cli import main", "cone", {"cli"}),
        ("import cone.service.app", "cli", {"service"}),
    ],
)
def test_every_form_of_import_is_read(source, folder, folders, tmp_path):
    module = tmp_path / folder / "module.py"
    module.parent.mkdir()
    module.write_text(source + "\n")
    assert imported_folders(module) == folders
