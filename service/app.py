"""The FastAPI app: /search, /compare, /models, /histogram, /geometry, health, admin reload and the page."""

from __future__ import annotations

import hmac
import json
import os
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, FastAPI, Header, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.routing import APIRoute
from pydantic import BaseModel, StringConstraints
from starlette.exceptions import HTTPException as StarletteHTTPException

from cone import __version__
from cone.errors import InputError, StoreUnavailable
from cone.indexing.postprocess import is_synthetic
from cone.indexing.spec import LEXICAL, recorded_type
from cone.service.batching import DEFAULT_BATCHING, BatchSettings
from cone.service.limits import BodyLimit, json_response, one_line, short, validation_error
from cone.service.middleware import HeadAsGet, SecurityHeaders, Utf8Query
from cone.service.plots import histogram_png
from cone.service.progress import FAILED, BuildProgress, ModelProgress
from cone.service.registry import Entry, FolderGone, IndexFailed, Registry
from cone.service.schemas import (
    MAX_BODY_BYTES,
    MAX_MODEL_CHARS,
    BuildState,
    CompareResponse,
    ErrorResponse,
    GeometryResponse,
    Histogram,
    HistogramsResponse,
    ModelInfo,
    ModelsResponse,
    Readiness,
    ReloadResponse,
    SearchHit,
    SearchQuery,
    SearchRequest,
    SearchResponse,
    Status,
)

ADMIN_KEY_ENV = "CONE_ADMIN_KEY"
PAGE = Path(__file__).with_name("static") / "index.html"
ERRORS = {code: {"model": ErrorResponse} for code in (404, 409, 413, 503)}
ModelName = Annotated[
    str, Query(min_length=1, max_length=MAX_MODEL_CHARS, description="an index name from GET /models")
]
ModelNames = Annotated[
    list[Annotated[str, StringConstraints(min_length=1, max_length=MAX_MODEL_CHARS)]] | None,
    Query(description="index names from GET /models, the parameter repeated (?model=a&model=b); default all"),
]


def _json_int(digits: str) -> int | Decimal:
    """A JSON integer; one past Python's int() digit limit (a 5,000-digit "k") as a Decimal, which no integer
    field takes: a 422 naming the field, not the 400 "error parsing the body" that int() raising would give."""
    return int(digits) if len(digits) <= 4000 else Decimal(digits)


class JSONBodyRequest(Request):
    async def json(self) -> object:
        if not hasattr(self, "_json"):
            self._json = json.loads(await self.body(), parse_int=_json_int)
        return self._json


class JSONBodyRoute(APIRoute):
    """Routes whose JSON bodies are parsed by ``JSONBodyRequest``."""

    def get_route_handler(self):  # noqa: ANN201 (Starlette's handler type)
        handler = super().get_route_handler()

        async def parse_with_int_bound(request: Request) -> Response:
            return await handler(JSONBodyRequest(request.scope, request.receive))

        return parse_with_int_bound


router = APIRouter(route_class=JSONBodyRoute)


async def get_registry(request: Request) -> Registry:
    # async: it only reads, and FastAPI runs a plain def dependency in its thread pool, a trip each request.
    registry: Registry = request.app.state.registry
    if not registry.ready.is_set():
        raise HTTPException(503, "indexes are still loading; see GET /readyz")
    return registry


RegistryDep = Annotated[Registry, Depends(get_registry)]


def find_entry(registry: Registry, name: str, need_index: bool = True) -> Entry:
    """The entry named ``name``: 404 if there is none; without an index, 503 while it is being built (it will
    answer: try again), 409 otherwise (it will not until something is fixed: the reason says what)."""
    entry = registry.entries.get(name)
    if entry is None:
        names = ", ".join(short(n)[1:-1] for n in registry.entries)  # folder names are any text: quoted, one line
        raise HTTPException(404, f"unknown model {short(name)}; GET /models lists them: {names}")
    if need_index and not entry.available:
        if (build := registry.building(name)) is not None:
            raise HTTPException(503, f"model {name!r} is still being built ({build_line(build)}); GET /readyz")
        raise HTTPException(503 if entry.transient else 409, f"model {name!r} is unavailable: {entry.reason}")
    return entry


def build_line(build: ModelProgress) -> str:
    """Where a build is, in words: queued; documents encoded and the time left; writing its indexes."""
    if build.state == "queued":
        return "queued behind the models before it"
    if build.state == "indexing":
        return f"{build.total:,} documents encoded, writing its indexes"
    left = build.seconds_left()
    about = "" if left is None else f", about {left / 60:.0f} min left" if left >= 90 else f", about {left:.0f} s left"
    return f"{build.done:,} of {build.total:,} documents encoded{about}"


def build_state(build: ModelProgress) -> BuildState:
    return BuildState(
        model=build.model, state=build.state, done=build.done, total=build.total, seconds_left=build.seconds_left()
    )


def synthetic(entry: Entry) -> bool:
    return entry.manifest is not None and is_synthetic(entry.manifest.postprocess)


def index_spec(factory: str, metric: str | None) -> str:
    """The index type with its metric, as the page names it (lance:IVF_PQ@l2); a manifest's own string where
    it names no type cone knows (that index is listed unavailable with its reason)."""
    try:
        return recorded_type(factory, metric).spec
    except InputError:
        return factory


def info(entry: Entry, build: ModelProgress | None = None) -> ModelInfo:
    """What GET /models says of an entry; ``build``: its build, while it is on its way (the reason then)."""
    m = entry.manifest
    return ModelInfo(
        name=entry.name,
        model=m and m.model,
        layer=m and m.layer,
        index_factory=m and m.index_factory and index_spec(m.index_factory, m.index_metric),
        available=entry.available,
        reason=f"being built: {build_line(build)}" if build else entry.reason,
        dim=m and m.dim,
        n_docs=m and m.n_docs,
        postprocess=m and m.postprocess,
        synthetic=synthetic(entry),
        metric=m and m.metric,
        geometry=m and m.geometry,
        building=build and build_state(build),
    )


def search_entry(entry: Entry, q: str, k: int) -> SearchResponse:
    try:
        hits, spread = entry.search(q, k)
    except IndexFailed as exc:  # the entry marked itself unavailable, with the reason: the other indexes serve on
        raise HTTPException(409, str(exc)) from None
    except StoreUnavailable as exc:  # its server is unreachable now: this index alone, and the next search tries again
        raise HTTPException(503, f"model {entry.name!r} is unavailable for now: {exc}") from None
    return SearchResponse(
        model=entry.name,
        query=q,
        k=k,
        synthetic=synthetic(entry),
        metric=entry.manifest.metric,
        hits=[
            SearchHit(rank=rank, doc_id=h.doc_id, title=h.title, snippet=h.snippet, score=h.score)
            for rank, h in enumerate(hits, 1)
        ],
        spread=spread,
    )


def histogram_of(entry: Entry) -> Histogram:
    summary = entry.manifest and entry.manifest.random_pair_cosines
    if summary is None:
        detail = "BM25 scores are not cosines" if entry.manifest and entry.manifest.kind == LEXICAL else None
        raise HTTPException(409, f"model {entry.name!r} has no cosine histogram: {detail or 'rebuild its index'}")
    name = f"{entry.name} (synthetic)" if synthetic(entry) else entry.name
    return Histogram(name=name, **summary.histogram.model_dump(), **summary.model_dump(exclude={"histogram"}))


@router.get("/models", response_model=ModelsResponse, responses=ERRORS)
def models(registry: RegistryDep) -> ModelsResponse:
    """Every model: availability (with the reason), dimension, documents, post-processing, geometry."""
    return ModelsResponse(models=[info(e, registry.building(e.name)) for e in registry.entries.values()])


def serialized(answer: BaseModel) -> Response:
    """A response model's JSON, written once here. FastAPI would dump a returned model to a dict, validate it against
    the route's model again (in a second trip to the thread pool, for a sync route) and serialize it: the work of
    every search, and the service's rate is bound by such Python (docs/benchmarks.md). The route still declares its
    model, for the schema and the docs."""
    return Response(answer.model_dump_json(), media_type="application/json")


@router.get("/search", response_model=SearchResponse, responses=ERRORS)
def search_get(registry: RegistryDep, model: ModelName, params: Annotated[SearchQuery, Query()]) -> Response:
    """Ranked hits with cosine scores, and this query's score spread over the whole corpus."""
    return serialized(search_entry(find_entry(registry, model), params.q, params.k))


@router.post("/search", response_model=SearchResponse, responses=ERRORS)
def search_post(registry: RegistryDep, body: SearchRequest) -> Response:
    return serialized(search_entry(find_entry(registry, body.model), body.q, body.k))


def chosen_entries(registry: Registry, names: list[str] | None) -> list[Entry]:
    """The named entries, each once, in the order named (404 for an unknown one); all without names."""
    if not names:
        return list(registry.entries.values())
    return [find_entry(registry, name, need_index=False) for name in dict.fromkeys(names)]


@router.get("/compare", response_model=CompareResponse, responses=ERRORS)
def compare(
    registry: RegistryDep, params: Annotated[SearchQuery, Query()], model: ModelNames = None
) -> CompareResponse:
    """The same query against the chosen available models (default every one), side by side."""
    entries = chosen_entries(registry, model)
    results = []
    for entry in entries:
        if entry.available:
            with suppress(HTTPException):  # damaged while served: then listed unavailable, with the reason
                results.append(search_entry(entry, params.q, params.k))
    return CompareResponse(
        query=params.q,
        k=params.k,
        results=results,
        unavailable=[info(e, registry.building(e.name)) for e in entries if not e.available],
    )


@router.get(
    "/histogram",
    response_model=None,
    responses={**ERRORS, 200: {"content": {"image/png": {}, "application/json": {}}}},
)
def histogram(
    registry: RegistryDep,
    model: ModelNames = None,
    format: Literal["png", "json"] = "png",
    size: Literal["full", "small"] = "full",
) -> Response:
    """Random-pair cosine distribution of one model, or of several overlaid (default: every dense model)."""
    if model:
        found = [histogram_of(e) for e in chosen_entries(registry, model)]
    else:
        dense = [e for e in registry.entries.values() if e.manifest and e.manifest.random_pair_cosines]
        found = [histogram_of(e) for e in dense]
    if format == "json":
        return JSONResponse(HistogramsResponse(histograms=found).model_dump())
    return Response(histogram_png([h.model_dump() for h in found], small=size == "small"), media_type="image/png")


@router.get("/geometry", response_model=GeometryResponse, responses=ERRORS)
def geometry(registry: RegistryDep, model: ModelName) -> GeometryResponse:
    """Every instrument of geometry/ on this index's vectors."""
    entry = find_entry(registry, model, need_index=False)
    m = entry.manifest
    if m is None or m.geometry is None:
        raise HTTPException(409, f"model {model!r} has no geometry: {entry.reason or 'BM25 has no vectors'}")
    return GeometryResponse(name=entry.name, geometry=m.geometry, geometry_raw=m.geometry_raw)


@router.get("/healthz", response_model=Status)
def healthz() -> Status:
    return Status(status="ok")


@router.get("/readyz", response_model=Readiness, responses={503: {"model": Readiness}})
def readyz(request: Request) -> Response:
    """200 once every index in the folder is loaded (or known unavailable, with its reason in GET /models); 503
    before. Under `cone demo`, also the models still being built (they join one by one) and the eval report."""
    registry: Registry = request.app.state.registry
    if not registry.ready.is_set():
        return JSONResponse(Readiness(status="loading").model_dump(), status_code=503)
    entries = list(registry.entries.values())
    available = sum(e.available for e in entries)
    state = Readiness(
        status="ready", available=available, unavailable=len(entries) - available, recovered=registry.notes
    )
    if (builds := registry.builds) is not None:
        state.background = f"{FAILED}: {builds.failure}" if builds.stage == FAILED else builds.stage
        state.building = [build_state(b) for b in builds.pending()]
        state.report = "/report" if builds.report else None
    return JSONResponse(state.model_dump())


def report_file(registry: Registry, name: str) -> Path:
    builds = registry.builds
    if builds is None:
        raise HTTPException(404, "this service has no eval report (`cone demo` serves its own; `cone eval` writes one)")
    if builds.report is None:
        raise HTTPException(404, "the eval report is written once every index is built and evaluated; GET /readyz")
    path = builds.report / name
    if not path.is_file():
        raise HTTPException(404, f"{path}: no longer there (the next `cone demo` writes it again)")
    return path


@router.get("/report", response_class=FileResponse, responses={404: {"model": ErrorResponse}})
def report_markdown(registry: RegistryDep) -> FileResponse:
    """`cone demo`'s eval report (report.md, as text) once every index is built and evaluated."""
    return FileResponse(report_file(registry, "report.md"), media_type="text/plain; charset=utf-8")


@router.get("/report.json", response_class=FileResponse, responses={404: {"model": ErrorResponse}})
def report_json(registry: RegistryDep) -> FileResponse:
    """The same report as JSON (schema in docs/eval.md)."""
    return FileResponse(report_file(registry, "report.json"), media_type="application/json")


@router.post("/admin/reload", response_model=ReloadResponse, responses={401: {"model": ErrorResponse}, **ERRORS})
async def reload(request: Request, x_api_key: Annotated[str | None, Header()] = None) -> ReloadResponse:
    """Re-read the index folder and swap the new set in atomically. Needs $CONE_ADMIN_KEY; off without it.
    A folder that went away (moved, replaced by a file) is a 503 and the indexes loaded before keep serving.
    Reloads coalesce (Registry.request_reload) and run on the registry's thread; the request waits for its
    reload here, on the event loop, holding none of the threads that run searches."""
    expected = os.environb.get(ADMIN_KEY_ENV.encode())
    if not expected:
        raise HTTPException(404, f"admin reload is disabled (start the service with {ADMIN_KEY_ENV} set)")
    # Bytes against bytes: the key as the environment holds it (UTF-8 on this system) and the header as sent.
    # Starlette decodes headers as Latin-1, which gives the sent bytes back exactly; comparing its str's UTF-8
    # would match a non-ASCII key only when it was sent Latin-1 encoded.
    sent = None if x_api_key is None else x_api_key.encode("latin-1")
    if sent is None or not hmac.compare_digest(sent, expected):
        raise HTTPException(401, "missing or wrong X-API-Key")
    try:
        entries = await request.app.state.registry.wait_reload()
    except FolderGone as exc:
        raise HTTPException(503, str(exc)) from None
    return ReloadResponse(models=len(entries), available=sum(e.available for e in entries.values()))


@router.get("/", include_in_schema=False)
def page() -> FileResponse:
    return FileResponse(PAGE, media_type="text/html")


async def one_line_error(request: Request, exc: StarletteHTTPException) -> Response:
    """Starlette's JSON error, its detail always one line (a reason may quote a folder's name or a file's text)."""
    detail = one_line(exc.detail) if isinstance(exc.detail, str) else exc.detail
    response = json_response({"detail": detail}, exc.status_code)
    response.headers.update(exc.headers or {})
    return response


def create_app(
    indexes: Path,
    checkpoints: Path | None = None,
    load_in_background: bool = True,
    max_body_bytes: int = MAX_BODY_BYTES,
    batching: BatchSettings = DEFAULT_BATCHING,
    docs: bool = True,
    builds: BuildProgress | None = None,
) -> FastAPI:
    """The app over every index in ``indexes``; /readyz turns ready once they are loaded. ``docs``: serve /docs
    and /redoc (their scripts come from a public CDN). ``builds``: what a background builder is still making;
    each model joins when it is written, and the eval report is served once the builder sets it."""
    registry = Registry(indexes, checkpoints, batching, builds)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if load_in_background:
            threading.Thread(target=registry.load, name="load-indexes", daemon=True).start()
        else:
            registry.load()
        yield

    app = FastAPI(
        title="cone",
        version=__version__,
        description="Semantic search over every model's index, with the geometry that decides whether it works.",
        lifespan=lifespan,
        docs_url="/docs" if docs else None,
        redoc_url="/redoc" if docs else None,
    )
    app.state.registry = registry
    app.include_router(router)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(StarletteHTTPException, one_line_error)
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    app.add_middleware(Utf8Query)
    app.add_middleware(HeadAsGet)
    app.add_middleware(SecurityHeaders, page=PAGE)  # the outermost: on every answer, the refusals included
    return app
