"""Geometry corrections (and synthetic degradations) fitted on corpus vectors and applied identically to queries.

Repairs: none; center (subtract the corpus mean); whiten (BERT-whitening, Su et al. 2021:
x -> (x - mu) U S^-1/2 from cov = U S U^T); abtt:K (all-but-the-top, Mu & Viswanath 2018:
remove the mean and the projections on the top K principal directions); standardize (subtract the mean and
divide each coordinate by its standard deviation: the repair for rogue dimensions, which it scales back to the
others without rotating the space).

Synthetic degradations of a real model's vectors (never a model of their own):
cone:C adds a shared offset along the corpus mean direction, of the norm that makes random document
pairs' mean cosine exactly C (found by bisection on the exact mean pairwise cosine); rogue:K:S scales
the K coordinates of largest corpus variance by S, the outlier dimensions of BERT / GPT-2 / RoBERTa
(Timkey & van Schijndel 2021).

Specs compose left to right with "+": cone:0.99+whiten whitens the coned vectors. Each stage is fitted
on the output of the stages before it.
"""

from __future__ import annotations

import re

import numpy as np

from cone.errors import InputError
from cone.geometry import anisotropy, moments

_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"  # 0.99, .5, 30, 1e-05, 1e+16 (no sign, no nan/inf)
_STAGES = re.compile(r"(?<![eE])\+|\+(?!\d)")  # "+" joins stages, but not in an exponent (rogue:2:1e+20)
_ABTT = re.compile(r"^abtt:(\d+)$")
_CONE = re.compile(rf"^cone:({_NUMBER})$")
_ROGUE = re.compile(rf"^rogue:(\d+):({_NUMBER})$")
WHITEN_EPS = 1e-6
CONE_TOLERANCE = 1e-5  # of the achieved mean pairwise cosine, by bisection
SYNTHETIC = ("cone:", "rogue:")
# The arrays each stage fits, in the order ``apply`` uses them.
STAGE_ARRAYS = {"none": [], "center": ["mean"], "whiten": ["mean", "transform"], "abtt": ["mean", "directions"]}
STAGE_ARRAYS |= {"standardize": ["mean", "inverse_std"]}
STAGE_ARRAYS |= {"cone": ["shift"], "rogue": ["scale"]}
HELP = (
    "none, center, whiten, standardize, abtt:K, cone:C (0 <= C < 1), rogue:K:S, or stages joined by + "
    "(cone:0.99+whiten)"
)


def number(value: float) -> str:
    """The canonical text of a stage's number: the shortest that reads back as exactly ``value`` (repr), with
    no ".0" on a whole number below 1e16 (rogue:2:30, as the index names of earlier builds have it), and no "+"
    in an exponent (1e+20 -> 1e20: "+" joins stages)."""
    if value.is_integer() and abs(value) < 1e16:
        return str(int(value))
    return repr(value).replace("e+", "e")


def _parse_stage(stage: str) -> str:
    stage = stage.strip()
    if stage in ("none", "center", "whiten", "standardize"):
        return stage
    if (match := _ABTT.match(stage)) and int(match.group(1)) >= 1:
        return stage
    if (match := _CONE.match(stage)) and float(match.group(1)) < 1:
        return f"cone:{number(float(match.group(1)))}"
    if (match := _ROGUE.match(stage)) and int(match.group(1)) >= 1 and 0 < float(match.group(2)) < float("inf"):
        return f"rogue:{int(match.group(1))}:{number(float(match.group(2)))}"
    raise InputError(f"unknown --postprocess stage {stage!r}; choose {HELP}")


def parse(spec: str) -> str:
    """Validate a post-processing spec; returns it normalised (stages joined by +, 'none' dropped from chains)."""
    stages = [_parse_stage(s) for s in _STAGES.split(spec)]
    stages = [s for s in stages if s != "none"] or ["none"]
    return "+".join(stages)


def folder_part(spec: str) -> str:
    """``spec`` (parsed) as part of an index folder's name, in a filename's portable characters (A-Z a-z 0-9 . _ -):
    abtt:3 -> abtt3, cone:0.99 -> cone0.99, rogue:2:30 -> rogue2x30, cone:1e-05 -> cone1e-05;
    stages joined by -. Distinct specs give distinct names."""
    return "-".join(stage.replace(":", "", 1).replace(":", "x") for stage in parse(spec).split("+"))


def is_synthetic(spec: str) -> bool:
    """Whether the spec degrades the vectors on purpose (cone:, rogue:): its results are not a model's own."""
    return any(stage.startswith(SYNTHETIC) for stage in parse(spec).split("+"))


def _kind(stage: str) -> str:
    return stage.split(":")[0]


def _key(index: int, n_stages: int, name: str) -> str:
    # One stage keeps the bare names (mean, transform, ...): the files of indexes built before chains existed.
    return name if n_stages == 1 else f"{index}.{name}"


def param_names(spec: str) -> list[str]:
    """The arrays ``fit`` returns for ``spec``, sorted."""
    stages = parse(spec).split("+")
    return sorted(_key(i, len(stages), n) for i, s in enumerate(stages) for n in STAGE_ARRAYS[_kind(s)])


def _cone_shift(x: np.ndarray, target: float) -> np.ndarray:
    """The offset a * u (u the unit mean direction) whose addition makes the mean pairwise cosine ``target``."""
    mean = x.mean(axis=0, dtype=np.float64)
    u = mean / np.linalg.norm(mean) if np.linalg.norm(mean) > 1e-12 else np.eye(x.shape[1])[0]

    def achieved(a: float) -> float:
        return anisotropy((x + a * u).astype(np.float64)).value

    if achieved(0.0) >= target:
        raise InputError(f"cone:{number(target)}: the vectors' mean pairwise cosine is already {achieved(0.0):.4f}")
    scale = float(np.linalg.norm(x, axis=1).mean())
    low, high = 0.0, scale
    while achieved(high) < target:
        high *= 2
    while high - low > 1e-9 * scale:
        mid = (low + high) / 2
        value = achieved(mid)
        if abs(value - target) < CONE_TOLERANCE:
            return mid * u
        low, high = (mid, high) if value < target else (low, mid)
    return high * u


def _fit_stage(x: np.ndarray, stage: str) -> dict[str, np.ndarray]:
    kind = _kind(stage)
    if kind == "none":
        return {}
    if kind == "cone":
        return {"shift": _cone_shift(x, float(stage[5:]))}
    stats = moments(x)
    if kind == "rogue":
        k, factor = int(stage.split(":")[1]), float(stage.split(":")[2])
        if k >= x.shape[1]:
            raise InputError(f"{stage}: a {x.shape[1]}-dim space has no {k} outlier dimensions to make")
        scale = np.ones(x.shape[1])
        scale[np.argsort(-np.diag(stats.cov), kind="stable")[:k]] = factor
        return {"scale": scale}
    params = {"mean": stats.mean}
    if kind == "whiten":
        eigval, eigvec = np.linalg.eigh(stats.cov)
        params["transform"] = eigvec / np.sqrt(np.maximum(eigval, 0.0) + WHITEN_EPS)
    elif kind == "abtt":
        k = int(stage.split(":")[1])
        if k >= x.shape[1]:
            raise InputError(f"abtt:{k} removes every direction of a {x.shape[1]}-dim space")
        _, eigvec = np.linalg.eigh(stats.cov)
        params["directions"] = eigvec[:, ::-1][:, :k].copy()
    elif kind == "standardize":
        params["inverse_std"] = 1.0 / np.sqrt(np.maximum(np.diag(stats.cov), WHITEN_EPS))
    return params


def _apply_stage(x: np.ndarray, params: dict[str, np.ndarray]) -> np.ndarray:
    if "shift" in params:
        x = x + params["shift"]
    if "scale" in params:
        x = x * params["scale"]
    if "mean" in params:
        x = x - params["mean"]
    if "inverse_std" in params:
        x = x * params["inverse_std"]
    if "transform" in params:
        x = x @ params["transform"]
    if "directions" in params:
        u = params["directions"]
        x = x - (x @ u) @ u.T
    return x


def fit(vectors: np.ndarray, spec: str) -> dict[str, np.ndarray]:
    """The parameters of ``spec`` on the corpus vectors (float64 arrays, saved with the index)."""
    stages = parse(spec).split("+")
    x, params = np.asarray(vectors, dtype=np.float64), {}
    for i, stage in enumerate(stages):
        fitted = _fit_stage(x, stage)
        x = _apply_stage(x, fitted)
        params |= {_key(i, len(stages), name): array for name, array in fitted.items()}
    return params


def _stages(params: dict[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
    if not any("." in key for key in params):
        return [params]
    count = 1 + max(int(key.split(".")[0]) for key in params)
    stages: list[dict[str, np.ndarray]] = [{} for _ in range(count)]
    for key, array in params.items():
        index, name = key.split(".", 1)
        stages[int(index)][name] = array
    return stages


def apply(vectors: np.ndarray, params: dict[str, np.ndarray]) -> np.ndarray:
    """Apply fitted parameters, stage by stage; the output is a new float32 array (not yet normalised)."""
    x = np.asarray(vectors, dtype=np.float64)
    for stage in _stages(params):
        x = _apply_stage(x, stage)
    return x.astype(np.float32)
