"""A sentence-transformers model run by ONNX Runtime or OpenVINO: exported once from the local weights into a
cache, by sentence-transformers' own backends and export helpers (never a hand-written exporter, never the hub).

An export folder is a complete sentence-transformers model folder plus its graph (``openvino/*.xml`` or
``onnx/*.onnx``), written beside its final name and renamed into place, so a reader never sees half of one.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import shutil
import tempfile
import uuid
from pathlib import Path

import numpy as np
from sentence_transformers import SentenceTransformer

from cone.cpu import bf16_is_fast, cpu_flags
from cone.data.loaders import lm_text_files
from cone.encoders.base import Runtime, files_fingerprint
from cone.errors import InputError, ModelUnavailable
from cone.models.corpus import read_documents
from cone.output import stdout_to_stderr

EXPORT_DIR_ENV = "CONE_EXPORT_DIR"
CALIBRATION_SENTENCES = 300  # NNCF's default subset size for static int8 calibration
CALIBRATION_SEED = 0

# The graph each runtime loads, relative to the export folder (the names sentence-transformers' helpers write).
GRAPH_FILES = {
    ("openvino", "none"): "openvino/openvino_model.xml",
    ("openvino", "bf16"): "openvino/openvino_model.xml",
    ("openvino", "int8"): "openvino/openvino_model_qint8_quantized.xml",
    ("onnx", "none"): "onnx/model.onnx",
    ("onnx", "int8"): "onnx/model_qint8_{isa}.onnx",
}
BACKEND_MODULES = {"onnx": ("onnxruntime", "optimum.onnxruntime"), "openvino": ("openvino", "optimum.intel")}
BACKEND_FIXES = {
    # optimum-onnx 0.1.0, the only release, needs transformers<4.58; sentence-transformers>=6 needs transformers>=5.
    "onnx": "pip install 'optimum-onnx[onnxruntime]' (its only release, 0.1.0, needs transformers<4.58, which "
    "sentence-transformers>=6 cannot use: today no environment has both)",
    "openvino": "pip install 'cone[openvino]' && pip install --no-deps 'optimum-intel==2.2.*' (README, Set-up)",
}


def export_dir() -> Path:
    return Path(os.environ.get(EXPORT_DIR_ENV, Path.home() / ".cache" / "cone" / "exports"))


def _onnx_isa() -> str:
    """The instruction set sentence-transformers' dynamic int8 ONNX config targets on this CPU."""
    flags = cpu_flags()
    return "avx512_vnni" if "avx512_vnni" in flags else "avx512" if "avx512f" in flags else "avx2"


def openvino_precision(runtime: Runtime) -> str:
    """OpenVINO's inference precision for the layers a runtime leaves in floating point: f32 for ``none`` (the
    reference's numbers), bf16 for ``bf16`` and for int8's unquantized layers where the CPU has native bf16."""
    if runtime.quantize == "bf16" and not bf16_is_fast():
        raise InputError("--quantize bf16 needs a CPU with native bf16 (avx512_bf16 or amx_bf16); this one has none")
    return "bf16" if runtime.quantize != "none" and bf16_is_fast() else "f32"


def graph_file(runtime: Runtime) -> str:
    return GRAPH_FILES[(runtime.backend, runtime.quantize)].format(isa=_onnx_isa())


def backend_missing(name: str, runtime: Runtime) -> ModelUnavailable | None:
    """Why ``runtime`` cannot run here (its packages are absent), from the installed modules alone."""
    if runtime.backend == "torch":
        return None
    for module in BACKEND_MODULES[runtime.backend]:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a parent package present but broken
            found = False
        if not found:
            reason = f"the {runtime.backend} backend needs {module}, which is not installed"
            return ModelUnavailable(name, reason, BACKEND_FIXES[runtime.backend])
    return None


def calibration_sentences(root: Path) -> list[str]:
    """The sentences static int8 is calibrated on: CALIBRATION_SENTENCES lines of the LM training text
    (``lmtext/*.txt`` under the data dir, drawn with a fixed seed). Unlabelled text: it shares sentences with
    STS-B test (both draw on the MSR paraphrase corpus), but calibration sees no score and learns no weight."""
    lines = read_documents(lm_text_files(Path(root), "int8 calibration"))
    rng = np.random.default_rng(CALIBRATION_SEED)
    picked = rng.choice(len(lines), size=min(CALIBRATION_SENTENCES, len(lines)), replace=False)
    return [lines[i] for i in sorted(picked)]


def _load_kwargs(runtime: Runtime) -> dict:
    kwargs: dict = {"file_name": graph_file(runtime)}
    if runtime.backend == "openvino":
        kwargs["ov_config"] = {"INFERENCE_PRECISION_HINT": openvino_precision(runtime)}
    else:
        kwargs["provider"] = "CPUExecutionProvider"
    return kwargs


def _quantize(model: SentenceTransformer, folder: Path, runtime: Runtime, sentences: list[str]) -> None:
    from sentence_transformers.backend import (
        export_dynamic_quantized_onnx_model,
        export_static_quantized_openvino_model,
    )

    if runtime.backend == "onnx":
        export_dynamic_quantized_onnx_model(model, _onnx_isa(), str(folder))
        return
    from optimum.intel import OVQuantizationConfig

    # The helper reads its calibration set with `datasets.load_dataset`: a local folder of JSON lines is one.
    with tempfile.TemporaryDirectory() as calibration:
        with (Path(calibration) / "train.jsonl").open("w", encoding="utf-8") as handle:
            for sentence in sentences:
                handle.write(json.dumps({"text": sentence}) + "\n")
        export_static_quantized_openvino_model(
            model,
            OVQuantizationConfig(num_samples=len(sentences)),
            str(folder),
            dataset_name=calibration,
            dataset_config_name="default",
            dataset_split="train",
            column_name="text",
        )


def _export(model: SentenceTransformer, folder: Path, runtime: Runtime, calibration_root: Path) -> None:
    """Write ``folder``: the model's own files, its exported graph, and the quantized graph if asked for."""
    # Static int8's calibration text is read first: without it, the error comes before seconds of conversion.
    static_int8 = runtime.quantize == "int8" and runtime.backend == "openvino"
    sentences = calibration_sentences(calibration_root) if static_int8 else []
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = folder.parent / f".{folder.name}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        model.save(str(tmp))
        converted = SentenceTransformer(str(tmp), device="cpu", backend=runtime.backend, local_files_only=True)
        converted.save(str(tmp))  # the graph beside the model files: the next load exports nothing
        if runtime.quantize == "int8":
            _quantize(converted, tmp, runtime, sentences)
        if not (tmp / graph_file(runtime)).is_file():
            raise InputError(f"exporting to {runtime.tag} wrote no {graph_file(runtime)}")
        try:
            os.rename(tmp, folder)
        except OSError:  # another process exported the same model first: its folder stands
            if not (folder / graph_file(runtime)).is_file():
                raise InputError(f"{folder} exists without {graph_file(runtime)}: delete it to export again") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_by(
    model: SentenceTransformer, name: str, weights: str, runtime: Runtime, calibration_root: Path
) -> tuple[SentenceTransformer, str]:
    """``model`` (loaded with torch) run by ``runtime``, exported on first use; and the fingerprint of what runs:
    the graph's bytes, the runtime and its precision."""
    if (absent := backend_missing(name, runtime)) is not None:
        raise absent
    precision = openvino_precision(runtime) if runtime.backend == "openvino" else "fp32"  # bf16 refused up front
    # none and bf16 run the same graph (only the inference precision differs): one export serves both. ONNX's
    # int8 graph is built for this CPU's instruction set, so the set is part of its folder's name.
    variant = {"int8": f"-int8-{_onnx_isa()}" if runtime.backend == "onnx" else "-int8"}.get(runtime.quantize, "")
    folder = export_dir() / f"{weights}-{runtime.backend}{variant}"
    if not (folder / graph_file(runtime)).is_file():
        try:
            with stdout_to_stderr():  # NNCF's and OpenVINO's progress bars print on stdout: a --json's output
                _export(model, folder, runtime, calibration_root)
        except InputError:
            raise
        except Exception as exc:  # OpenVINO, NNCF, datasets: a failed export is one line, and the model unavailable
            reason = f"export to {runtime.tag} failed ({type(exc).__name__}: {str(exc).splitlines()[0][:160]})"
            raise ModelUnavailable(name, reason, f"report it, or use --backend torch; cache: {export_dir()}") from None
    # optimum-intel warns on every load by file name that it "could not infer" whether the folder is exported
    # (its own file search fails on the name it was given) and then loads that file, as asked: noise, muted.
    quiet = logging.getLogger("optimum.intel.openvino.modeling_base")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        loaded = SentenceTransformer(
            str(folder),
            device="cpu",
            backend=runtime.backend,
            model_kwargs=_load_kwargs(runtime),
            local_files_only=True,
        )
    finally:
        quiet.setLevel(level)
    # The export folder is named by the weights alone, so it may come from another folder of the same weights with
    # other prompts (e5's "query: " / "passage: " edited, say). Prompts are text put before the tokens, no part of
    # the graph: the model's own run, never the exporter's.
    loaded.prompts, loaded.default_prompt_name = dict(model.prompts), model.default_prompt_name
    graph = folder / graph_file(runtime)
    files = [graph, graph.with_suffix(".bin")] if runtime.backend == "openvino" else [graph]
    return loaded, f"{files_fingerprint([f for f in files if f.is_file()])}-{runtime.tag}-{precision}"
