"""report.json's schema (docs/eval.md): what the eval writes, and what every reader reads (the tests, the
benchmark tables, the checks of the docs' figures). Reading is validation: a report that does not fit is one
InputError naming the key."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from cone.errors import InputError


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class ResultRecord(_Record):
    """One row: the index it searched (model, layer, post-processing, index type with its metric, runtime), its
    folder's name, and its metrics (docs/eval.md lists the keys); ``reason`` where it is unavailable."""

    model: str
    layer: str | int
    postprocess: str
    factory: str
    runtime: str
    synthetic: bool
    index: str | None
    available: bool
    reason: str | None
    metrics: dict[str, float | int | None]


class Delta(_Record):
    """A paired bootstrap's difference b - a with its 95% interval."""

    name: str
    delta: float
    ci95: tuple[float, float]
    significant: bool


class ComparisonRecord(_Record):
    """Row ``b`` against row ``a``, by their labels."""

    a: str
    b: str
    ndcg_delta: float
    ndcg_p: float
    ndcg_p_adjusted: float
    ndcg_significant: bool
    sts: list[Delta]
    threshold_f1: Delta | None
    hubness_skew: Delta | None


class Report(_Record):
    dataset: str
    quick: bool
    cone_version: str
    command: str
    results: list[ResultRecord]
    comparisons: list[ComparisonRecord]

    def to_json(self) -> dict:
        return self.model_dump(mode="json")


def read_report(path: Path) -> Report:
    """A report.json, validated; one InputError line for a missing, corrupt or foreign file."""
    try:
        return Report.model_validate(json.loads(Path(path).read_text(encoding="utf-8")))
    except OSError as exc:
        raise InputError(f"{path}: cannot read the report ({exc.strerror})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: not a report (corrupt JSON: {exc})") from None
    except ValidationError as exc:
        error = exc.errors()[0]
        key = ".".join(str(p) for p in error["loc"])
        raise InputError(f"{path}: not a report of this cone ({key}: {error['msg']})") from None
