"""Fault injection: damaged manifests and checkpoint configs, a kill at every step of an index swap, hostile
requests, and the bad inputs of the command line. Whatever is damaged becomes unavailable with a reason;
nothing else stops answering, nothing answers 500, no command prints a traceback."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import threading
import time
import traceback
from pathlib import Path

import numpy as np
import pytest
import uvicorn
from fastapi.testclient import TestClient

from cone.cli import main
from cone.cli.serve import body_limit_from_env
from cone.data.loaders import load_beir
from cone.encoders.registry import Encoders
from cone.errors import DamagedIndex, InputError
from cone.indexing import store
from cone.indexing.lexical import build_bm25
from cone.indexing.manifest import REQUIRED
from cone.indexing.open import open_index
from cone.output import dump_json
from cone.service.app import create_app
from cone.service.registry import Registry, load_entries
from cone.service.schemas import MAX_BODY_BYTES

from local_service import free_port, wait_ready
from tiny import build_tiny_indexes

ROOT = Path(__file__).resolve().parents[1]


def wrong_type(value: object) -> object:
    """A value of another JSON type than ``value``'s."""
    if isinstance(value, bool):
        return "yes"
    if isinstance(value, str):
        return 12345
    if isinstance(value, int | float):
        return "x"
    if isinstance(value, dict):
        return [1]
    return {"x": 1}  # a list, or null


@pytest.fixture(scope="module")
def built(shared_tiny_beir, tiny_checkpoints, tmp_path_factory) -> Path:
    return build_tiny_indexes(
        tmp_path_factory.mktemp("good"), shared_tiny_beir, tiny_checkpoints, [("baseline", "none")]
    )


def damaged_variants(built: Path, root: Path) -> dict[str, str]:
    """Beside a good baseline and bm25: one index per (manifest key, deleted | wrong type). Name -> the key."""
    shutil.copytree(built / "baseline", root / "baseline")
    shutil.copytree(built / "bm25", root / "bm25")
    variants = {}
    for source in ("baseline", "bm25"):
        manifest = json.loads((built / source / "manifest.json").read_text())
        for key in manifest:
            for how in ("deleted", "wrong"):
                name = f"{source}--{key}--{how}"
                shutil.copytree(built / source, root / name)
                damaged = dict(manifest)
                if how == "deleted":
                    del damaged[key]
                else:
                    damaged[key] = wrong_type(manifest[key])
                (root / name / "manifest.json").write_text(json.dumps(damaged))
                variants[name] = key
    return variants


def test_every_damaged_manifest_key_leaves_the_service_up(built, tiny_checkpoints, tmp_path):
    variants = damaged_variants(built, tmp_path)
    with TestClient(create_app(tmp_path, tiny_checkpoints, load_in_background=False)) as client:
        ready = client.get("/readyz")
        assert ready.status_code == 200 and ready.json()["status"] == "ready"
        models = {m["name"]: m for m in client.get("/models").json()["models"]}
        for good in ("baseline", "bm25"):
            assert models[good]["available"]
            assert client.get("/search", params={"model": good, "q": "cell protein"}).status_code == 200
        unavailable = set()
        for name, key in variants.items():
            if not models[name]["available"]:
                unavailable.add(name)
                assert key in models[name]["reason"], (name, models[name]["reason"])
                continue
            # Only an optional key may go: the index still answers every endpoint, without a 500.
            for path in ("/search", "/histogram", "/geometry"):
                got = client.get(path, params={"model": name, "q": "cell protein", "format": "json"})
                assert got.status_code in (200, 409), (name, path, got.text[:200])
        required = {
            **{f"baseline--{k}--deleted": k for k in REQUIRED["dense"]},
            **{f"bm25--{k}--deleted": k for k in REQUIRED["bm25"]},
        }
        wrong = {name for name in variants if name.endswith("--wrong")}
        assert unavailable == wrong | set(required)  # every wrong type and every required key; nothing else
        for path in ("/compare?q=cell", "/histogram?format=json", "/histogram", "/models", "/"):
            assert client.get(path).status_code == 200, path


def test_wrong_types_are_all_refused(built, tiny_checkpoints, tmp_path):
    variants = damaged_variants(built, tmp_path)
    entries, _ = load_entries(tmp_path, tiny_checkpoints)
    wrong = [name for name in variants if name.endswith("--wrong")]
    assert wrong and [name for name in wrong if entries[name].available] == []


CONFIG_FIELDS = [
    "model",
    "train",
    "step",
    "tokens_seen",
    "train_tokens_in_corpus",
    "val_tokens_in_corpus",
    "unseen_token_ids",
]
MODEL_FIELDS = ["vocab_size", "n_embd", "n_layer", "n_head", "block_size", "pad_id"]
# Each field deleted or of a wrong type; the model's sizes also negative (a negative step or token count is not
# refused: only the sizes the weights are built with must be positive).
DAMAGES = [(field, how) for field in CONFIG_FIELDS for how in ("deleted", "wrong")] + [
    (f"model.{field}", how) for field in MODEL_FIELDS for how in ("deleted", "wrong", "negative")
]


@pytest.mark.parametrize(("field", "how"), DAMAGES)
def test_a_damaged_checkpoint_config_makes_only_its_model_unavailable(built, tiny_checkpoints, tmp_path, field, how):
    checkpoints = tmp_path / "checkpoints"
    shutil.copytree(tiny_checkpoints, checkpoints)
    config_file = checkpoints / "baseline" / "config.json"
    config = json.loads(config_file.read_text())
    holder, key = (config["model"], field[6:]) if field.startswith("model.") else (config, field)
    if how == "deleted":
        del holder[key]
    else:
        holder[key] = -4 if how == "negative" else wrong_type(holder[key])
    config_file.write_text(json.dumps(config))
    entries, _ = load_entries(built, checkpoints)
    assert not entries["baseline"].available and "corrupt checkpoint config" in entries["baseline"].reason
    assert entries["bm25"].available
    assert main(["geometry", "checkpoint", str(checkpoints / "baseline")]) == 2


def test_the_app_with_a_damaged_checkpoint_config_is_ready(built, tiny_checkpoints, tmp_path):
    checkpoints = tmp_path / "checkpoints"
    shutil.copytree(tiny_checkpoints, checkpoints)
    config = json.loads((checkpoints / "baseline" / "config.json").read_text())
    config["model"]["n_embd"] = "x"
    (checkpoints / "baseline" / "config.json").write_text(json.dumps(config))
    with TestClient(create_app(built, checkpoints, load_in_background=False)) as client:
        assert client.get("/readyz").status_code == 200
        assert client.get("/search", params={"model": "bm25", "q": "cell"}).status_code == 200
        assert client.get("/search", params={"model": "baseline", "q": "cell"}).status_code == 409


# The swap: a child process rebuilds the bm25 index and SIGKILLs itself before its Nth file-system step. The child is
# forked from this one, which has cone imported already: a fresh interpreter per step imported it again (2-3 s of
# CPU each, a dozen steps over the two tests); the kill, and what it leaves on disk, are the same.
def _build_killed_at(step: int, beir: Path, folder: Path) -> tuple[int, str]:
    """The child's exit code (-9 when it killed itself) and what it wrote: the steps it counted (step 0 never kills)
    or its traceback."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: it never returns into pytest
        code = 1
        try:
            os.close(read)
            count = [0]

            def killing(real):
                def call(*args, **kwargs):
                    count[0] += 1
                    if count[0] == step:
                        os.kill(os.getpid(), signal.SIGKILL)
                    return real(*args, **kwargs)

                return call

            os.rename, os.replace, shutil.rmtree = killing(os.rename), killing(os.replace), killing(shutil.rmtree)
            build_bm25(load_beir(beir, "tiny"), folder, progress=False)
            os.write(write, f"steps {count[0]}".encode())
            code = 0
        except BaseException:
            os.write(write, traceback.format_exc().encode())
        finally:
            os._exit(code)
    os.close(write)
    deadline = time.monotonic() + 120
    while (status := os.waitpid(pid, os.WNOHANG))[0] == 0:
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail(f"the build killed at step {step} did not end within 120 s")
        time.sleep(0.01)
    with os.fdopen(read) as said:
        return os.waitstatus_to_exitcode(status[1]), said.read()


@pytest.mark.slow
def test_a_kill_at_every_step_of_the_swap_leaves_a_servable_index(built, shared_tiny_beir, tmp_path):
    root = tmp_path / "indexes"
    shutil.copytree(built / "bm25", root / "bm25")
    # Step 0 never kills: it counts the steps of a build over an existing index (and its leftovers).
    code, said = _build_killed_at(0, shared_tiny_beir, root / "bm25")
    assert code == 0, said
    steps = int(said.split()[-1])
    assert steps >= 3  # write the manifest, move the old index aside, move the new one in, remove the old
    for step in range(1, steps + 1):
        code, said = _build_killed_at(step, shared_tiny_beir, root / "bm25")
        assert code == -signal.SIGKILL, (step, said[-500:])
        entries, notes = load_entries(root)
        bm25 = entries["bm25"]
        assert bm25.available, (step, bm25.reason, sorted(p.name for p in root.iterdir()))
        assert len(bm25.index.docs) == 40 and bm25.search("cell protein", 3)[0]
    # The next complete build cleans what the killed ones left.
    assert _build_killed_at(0, shared_tiny_beir, root / "bm25")[0] == 0
    assert sorted(p.name for p in root.iterdir()) == ["bm25"]


@pytest.mark.slow
def test_a_kill_between_the_two_renames_is_recovered_and_said(built, shared_tiny_beir, tmp_path):
    root = tmp_path / "indexes"
    shutil.copytree(built / "bm25", root / "bm25")
    code, said = _build_killed_at(0, shared_tiny_beir, root / "bm25")
    assert code == 0, said
    steps = int(said.split()[-1])
    for step in range(1, steps + 1):
        shutil.rmtree(root)
        shutil.copytree(built / "bm25", root / "bm25")
        code, said = _build_killed_at(step, shared_tiny_beir, root / "bm25")
        assert code == -signal.SIGKILL, (step, said[-500:])
        if not (root / "bm25").exists():  # this step fell between the renames
            entries, notes = load_entries(root)
            assert entries["bm25"].available and len(notes) == 1 and "recovered from .bm25.tmp-" in notes[0]
            return
    pytest.fail("no step of the swap left the name empty: the kill injection did not reach the renames")


# Hostile requests.
@pytest.fixture(scope="module")
def client(built, tiny_checkpoints):
    with TestClient(create_app(built, tiny_checkpoints, load_in_background=False)) as c:
        yield c


@pytest.mark.parametrize(
    "body",
    [
        '{"model": "baseline", "q": "cell", "k": NaN}',
        '{"model": "baseline", "q": "cell", "k": Infinity}',
        '{"model": "baseline", "q": "cell", "k": -Infinity}',
        '{"model": "baseline", "q": "cell", "k": 1e400}',
        '{"model": "baseline", "q": "\\ud800"}',
    ],
)
def test_non_finite_numbers_and_lone_surrogates_are_a_422(client, body):
    response = client.post("/search", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 422 and json.loads(response.text)["detail"]


def test_a_large_query_is_refused_without_echoing_it(client):
    q = "protein " * 7000  # 56,000 characters, under the body limit
    response = client.post("/search", json={"model": "baseline", "q": q})
    assert response.status_code == 422 and len(response.content) < 2000
    response = client.get("/search", params={"model": "m" * 5000, "q": "cell"})
    assert response.status_code == 422 and len(response.content) < 2000


def test_a_body_over_the_limit_is_a_413_before_it_is_read(client):
    big = b'{"model": "baseline", "q": "' + b"x" * (MAX_BODY_BYTES + 1) + b'"}'
    response = client.post("/search", content=big, headers={"content-type": "application/json"})
    assert response.status_code == 413 and "request body over" in response.json()["detail"]

    def chunks():  # no Content-Length: counted as it arrives
        for _ in range(20):
            yield b"x" * 16_384

    response = client.post("/search", content=chunks(), headers={"content-type": "application/json"})
    assert response.status_code == 413


def test_a_300_mb_upload_is_refused_from_its_headers(built, tiny_checkpoints):
    port = free_port()
    app = create_app(built, tiny_checkpoints)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_ready(f"http://127.0.0.1:{port}", timeout=60)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
            head = "POST /search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            conn.sendall((head + f"Content-Length: {300 * 2**20}\r\n\r\n").encode())
            answer = conn.recv(4096).decode()  # the answer comes before a single byte of the body is sent
        assert answer.startswith("HTTP/1.1 413")
    finally:
        server.should_exit = True
        thread.join(10)


# The command line's bad inputs: one line naming the file, exit 2.
def _one_line_error(capsys, argv, *fragments) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("cone: error:") and err.count("\n") == 1 and "Traceback" not in err
    for fragment in fragments:
        assert fragment in err, err


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        (b'{"_id": "d1", "title": "t", "text": "caf\xe9 au lait"}', "corpus.jsonl:41: not valid UTF-8"),
        (b'{"_id": "d1", "title": "t", "text": null}', "corpus.jsonl:41: 'text' is NoneType"),
        (b'{"_id": "d1", "title": "t", "text": {"a": 1}}', "corpus.jsonl:41: 'text' is dict"),
        (b'{"_id": true, "title": "t", "text": "x"}', "corpus.jsonl:41: '_id' is bool"),
        (b'{"_id": "d1", "title": 3, "text": "x"}', "corpus.jsonl:41: 'title' is int"),
    ],
)
def test_bad_corpus_lines_are_named(tiny_beir, tmp_path, capsys, line, fragment):
    corpus = tiny_beir / "tiny" / "corpus.jsonl"
    corpus.write_bytes(corpus.read_bytes() + line + b"\n")
    argv = ["index", "--model", "bm25", "--dataset", "tiny", "--data-dir", str(tiny_beir), "--out", str(tmp_path)]
    _one_line_error(capsys, argv, fragment)


def test_an_empty_corpus_is_one_line(tiny_beir, tmp_path, capsys):
    (tiny_beir / "tiny" / "corpus.jsonl").write_text("")
    argv = ["index", "--model", "bm25", "--dataset", "tiny", "--data-dir", str(tiny_beir), "--out", str(tmp_path)]
    _one_line_error(capsys, argv, "corpus.jsonl: no documents")


@pytest.mark.parametrize("value", ["x", -4])
def test_a_checkpoint_config_with_a_bad_width_is_one_line(tiny_checkpoints, tmp_path, capsys, value):
    folder = tmp_path / "ckpt"
    shutil.copytree(tiny_checkpoints / "baseline", folder)
    config = json.loads((folder / "config.json").read_text())
    config["model"]["n_embd"] = value
    (folder / "config.json").write_text(json.dumps(config))
    _one_line_error(capsys, ["geometry", "checkpoint", str(folder)], "config.json", "n_embd")


@pytest.mark.parametrize(
    ("matrix", "fragment"),
    [
        (np.full((3, 4), 1e300), "overflow float64"),
        (np.zeros((5, 8)), "rows 0, 1, 2, 3, 4 (5 of 5) all zero"),
        (np.vstack([np.ones((3, 4)), np.zeros((1, 4))]), "row 3 (1 of 4) all zero"),
    ],
)
def test_vectors_no_instrument_can_measure_are_refused_with_their_rows(tmp_path, capsys, matrix, fragment):
    path = tmp_path / "x.npy"
    np.save(path, matrix)
    _one_line_error(capsys, ["geometry", "vectors", str(path), "--json"], fragment)


def test_json_output_is_always_valid_json():
    text = dump_json({"a": float("nan"), "b": [float("inf"), 1.5], "c": {"d": -float("inf")}})
    assert json.loads(text) == {"a": None, "b": [None, 1.5], "c": {"d": None}}


# What a review of the hardening found, each pinned by a test.
def test_a_recovery_that_cannot_rename_is_said_not_raised(built, shared_tiny_beir, tmp_path, monkeypatch):
    root = tmp_path / "indexes"
    shutil.copytree(built / "bm25", root / ".bm25.tmp-0123abcd")  # as a kill between the renames leaves it
    real_rename = store.os.rename

    def read_only(src, dst):
        raise PermissionError(30, "Read-only file system")

    monkeypatch.setattr(store.os, "rename", read_only)
    entries, notes = load_entries(root)
    assert not entries["bm25"].available and "could not be put back (Read-only file system)" in notes[0]
    monkeypatch.setattr(store.os, "rename", real_rename)


def test_the_registry_is_ready_even_when_its_folder_cannot_be_listed(built, monkeypatch):
    def broken(*args, **kwargs):
        raise OSError("I/O error")

    monkeypatch.setattr("cone.service.registry.store.list_indexes", broken)
    registry = Registry(built)
    registry.load()
    assert registry.ready.is_set() and "cannot list indexes" in registry.notes[0]


def test_a_reader_recovering_during_the_swap_does_not_break_the_build(built, shared_tiny_beir, tmp_path, monkeypatch):
    root = tmp_path / "indexes"
    shutil.copytree(built / "bm25", root / "bm25")
    real_rename = store.os.rename
    recovered = []

    def rename_then_a_reader_looks(src, dst):
        real_rename(src, dst)
        if Path(dst).name.startswith(".bm25.old-"):  # between the two renames of the swap
            recovered.append(store.recover(root / "bm25"))

    monkeypatch.setattr(store.os, "rename", rename_then_a_reader_looks)
    build_bm25(load_beir(shared_tiny_beir, "tiny"), root / "bm25", progress=False)
    monkeypatch.setattr(store.os, "rename", real_rename)
    assert len(recovered) == 1 and recovered[0] is not None  # the reader did look mid-swap, and did recover
    assert load_entries(root)[0]["bm25"].available


def test_a_bad_body_limit_setting_is_one_line(monkeypatch):
    monkeypatch.setenv("CONE_MAX_BODY_BYTES", "64k")
    with pytest.raises(InputError, match="CONE_MAX_BODY_BYTES"):
        body_limit_from_env()
    monkeypatch.setenv("CONE_MAX_BODY_BYTES", "0")
    with pytest.raises(InputError, match="positive"):
        body_limit_from_env()


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["index", "--model", "baseline", "--out", "x", "--layer", "-2"], "argument --layer: expected last, emb or"),
        (["train", "--out", "x", "--seed", "-1"], "argument --seed: must be an integer >= 0, got -1"),
    ],
)
def test_negative_layers_and_seeds_are_argument_errors(argv, fragment, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and fragment in err.splitlines()[-1] and "Traceback" not in err


def test_a_layer_the_model_does_not_have_is_one_line(shared_tiny_beir, tiny_checkpoints, tmp_path, capsys):
    argv = ["index", "--model", "baseline", "--dataset", "tiny", "--data-dir", str(shared_tiny_beir)]
    argv += ["--checkpoints", str(tiny_checkpoints), "--out", str(tmp_path), "--layer", "99", "--no-progress"]
    _one_line_error(capsys, argv, "layer 99 of baseline: choose last, emb or 0..2")


def _dense(built: Path, tmp_path: Path, spec: str, tiny_checkpoints: Path, shared_tiny_beir: Path) -> Path:
    from cone.encoders.registry import load_encoder
    from cone.indexing.dense import build_dense

    enc = load_encoder("baseline", tiny_checkpoints)
    return build_dense(enc, load_beir(shared_tiny_beir, "tiny"), tmp_path / f"baseline-{spec}", spec, progress=False)


def test_index_files_that_disagree_with_the_manifest_are_damaged(built, tiny_checkpoints, shared_tiny_beir, tmp_path):
    folder = _dense(built, tmp_path, "center", tiny_checkpoints, shared_tiny_beir)
    np.savez(folder / "postprocess.npz")  # the centering's mean is gone: searching would serve uncentered vectors
    with pytest.raises(DamagedIndex, match="does not hold the 'center' fit"):
        open_index(folder, Encoders(tiny_checkpoints))
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["postprocess"], manifest["postprocess_params"], manifest["search_params"] = "none", {}, "nonsense=1"
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DamagedIndex, match="search_params"):
        open_index(folder, Encoders(tiny_checkpoints))
    bm25 = tmp_path / "bm25"
    shutil.copytree(built / "bm25", bm25)
    manifest = json.loads((bm25 / "manifest.json").read_text())
    manifest["n_docs"] = 39
    (bm25 / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DamagedIndex, match="holds 40 documents, manifest says 39"):
        open_index(bm25)
