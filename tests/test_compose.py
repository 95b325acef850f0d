"""No Docker engine here: the compose file is checked by parsing, and every command it runs by cone's own parser."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from cone.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_every_service_command_is_a_real_cone_command(compose):
    services = compose["services"]
    assert set(services) == {"index", "api"}
    for name, service in services.items():
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


def test_dockerfile_installs_the_pinned_cpu_torch_and_the_wheel():
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "torch==2.13.0" in dockerfile and "download.pytorch.org/whl/cpu" in dockerfile
    # The install path tests/test_install.py runs for real: build the wheel, install the wheel (not the source tree).
    assert "pip wheel --no-deps" in dockerfile and "pip install /dist/cone-*.whl" in dockerfile
    assert "pip install ." not in dockerfile and "pip install -e" not in dockerfile
