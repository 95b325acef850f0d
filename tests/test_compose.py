"""No Docker engine here: the compose file is checked by parsing, and every command it runs by cone's own parser."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from psycopg.conninfo import conninfo_to_dict

from cone.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_every_service_command_is_a_real_cone_command(compose):
    services = compose["services"]
    assert set(services) == {"index", "index-pg", "api", "postgres"}
    for name, service in services.items():
        if "image" in service:
            continue  # not cone's image: the database
        assert service["build"] == ".", name
        command = [str(part) for part in service["command"]]
        assert command[0] == "cone", name
        args = build_parser().parse_args(command[1:])  # exits (fails the test) on an unknown option
        assert callable(args.handler)
    assert build_parser().parse_args(services["index"]["command"][1:]).command == "eval"
    assert build_parser().parse_args([str(c) for c in services["api"]["command"][1:]]).command == "serve"


def test_api_waits_for_index_and_serves_its_volume(compose):
    index, api = compose["services"]["index"], compose["services"]["api"]
    assert api["depends_on"]["index"]["condition"] == "service_completed_successfully"
    volume = "cone-data"
    assert volume in compose["volumes"]
    index_out = build_parser().parse_args(index["command"][1:]).indexes
    served = build_parser().parse_args([str(c) for c in api["command"][1:]]).indexes
    assert index_out == served
    assert any(v.startswith(f"{volume}:") and str(served).startswith(v.split(":")[1]) for v in api["volumes"])
    assert all(port.startswith("127.0.0.1:") for port in api["ports"])


def test_the_pgvector_service_is_served_through_its_dsn(compose):
    """`index-pg` builds a pgvector index into the folder `api` serves, both reaching the `postgres` service by
    CONE_PG_DSN: the DSN names that service's user and database, and its password is CONE_PG_PASSWORD's (the
    development default where unset), never another written in clear."""
    services = compose["services"]
    postgres, index_pg, api = services["postgres"], services["index-pg"], services["api"]
    assert postgres["image"].startswith("pgvector/pgvector:pg") and "ports" not in postgres
    assert postgres["environment"]["POSTGRES_PASSWORD"] == "${CONE_PG_PASSWORD:-cone-dev}"
    assert any(v.startswith("pg-data:") for v in postgres["volumes"]) and "pg-data" in compose["volumes"]
    built = build_parser().parse_args(index_pg["command"][1:])
    assert built.command == "index" and built.index_factory.startswith("pg:")
    assert built.out == build_parser().parse_args([str(c) for c in api["command"][1:]]).indexes
    for service in (index_pg, api):
        assert service["depends_on"]["postgres"]["condition"] == "service_healthy"
        dsn = conninfo_to_dict(service["environment"]["CONE_PG_DSN"])
        assert dsn["host"] == "postgres" and dsn["password"] == postgres["environment"]["POSTGRES_PASSWORD"]
        assert (dsn["user"], dsn["dbname"]) == (
            postgres["environment"]["POSTGRES_USER"],
            postgres["environment"]["POSTGRES_DB"],
        )
    assert api["depends_on"]["index-pg"]["condition"] == "service_completed_successfully"


def dockerfile_stages(text: str) -> list[list[tuple[str, str]]]:
    """The Dockerfile as stages of (INSTRUCTION, arguments), comments and line continuations resolved."""
    stages: list[list[tuple[str, str]]] = []
    for line in text.replace("\\\n", " ").splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        instruction, _, arguments = line.strip().partition(" ")
        if instruction.upper() == "FROM":
            stages.append([])
        stages[-1].append((instruction.upper(), arguments.strip()))
    return stages


def dockerfile_problems(text: str) -> list[str]:
    """What keeps a Dockerfile from being cone's image: the wheel built in a first stage, installed in the second
    after the pinned CPU torch (the install path tests/test_install.py runs), never the source tree."""
    stages = dockerfile_stages(text)
    if len(stages) != 2:
        return [f"{len(stages)} stages, not a wheel stage and an image"]
    builder, final = stages
    runs = [args for instruction, args in final if instruction == "RUN"]
    torch_at = next((i for i, a in enumerate(runs) if "torch==2.13.0" in a.split() and "whl/cpu" in a), None)
    wheel_at = next((i for i, a in enumerate(runs) if a.startswith("pip install /dist/cone-") and ".whl" in a), None)
    checks = {
        "the first stage is not the wheel builder": builder[0] == ("FROM", "python:3.11-slim AS wheel"),
        "no wheel is built": ("RUN", "pip wheel --no-deps --wheel-dir /dist .") in builder,
        "torch==2.13.0 is not installed from the CPU index": torch_at is not None,
        "the builder's wheel is not installed": wheel_at is not None and ("COPY", "--from=wheel /dist /dist") in final,
        "the wheel is installed before torch": None in (torch_at, wheel_at) or torch_at < wheel_at,
        "pip installs something besides torch and the wheel": all(
            i in (torch_at, wheel_at) for i, a in enumerate(runs) if "pip install" in a
        ),
        "the image copies the source tree": all(i != "COPY" or a.startswith("--from=wheel") for i, a in final),
        "the image does not run cone": final[-1][0] == "CMD" and final[-1][1].startswith('["cone"'),
    }
    return [problem for problem, ok in checks.items() if not ok]


def test_dockerfile_builds_the_wheel_then_installs_it_after_the_pinned_cpu_torch():
    assert dockerfile_problems((ROOT / "Dockerfile").read_text()) == []


def test_a_dockerfile_that_installs_the_source_tree_is_refused():
    good = (ROOT / "Dockerfile").read_text()
    source = good.replace("COPY --from=wheel /dist /dist", "COPY . /src").replace(
        'RUN pip install /dist/cone-*.whl "psycopg[binary]>=3.2" && rm -rf /dist', "RUN pip install -e /src"
    )
    assert dockerfile_problems(source) == [
        "the builder's wheel is not installed",
        "pip installs something besides torch and the wheel",
        "the image copies the source tree",
    ]
    torch_last = good.replace("RUN pip install torch==2.13.0", "RUN true\nRUN pip install torch==2.13.0")
    torch_last = torch_last.replace("RUN true\n", "RUN pip install /dist/cone-*.whl\n")
    assert "the wheel is installed before torch" in dockerfile_problems(torch_last)
