from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from cone.service.batching import BatchSettings, MicroBatcher


class Doubler:
    """A batch function that records each batch it is given and can be told to wait or to fail."""

    def __init__(self, gate: threading.Event | None = None, fail_on: int | None = None) -> None:
        self.batches: list[list[int]] = []
        self.gate, self.fail_on = gate, fail_on

    def __call__(self, items):
        self.batches.append(list(items))
        if self.gate is not None:
            self.gate.wait(10)
        if self.fail_on in items:
            raise ValueError(f"cannot take {self.fail_on}")
        return [2 * i for i in items]


def submit_all(batcher: MicroBatcher, items: list[int], threads: int = 16) -> list:
    def ask(i):
        try:
            return batcher.submit(i)
        except ValueError as exc:
            return str(exc)

    with ThreadPoolExecutor(max_workers=threads) as pool:
        return list(pool.map(ask, items))


def test_concurrent_requests_share_batches_and_each_gets_its_own_result():
    run = Doubler()
    batcher = MicroBatcher(run, threading.Lock(), BatchSettings(window_ms=200, max_batch=8))
    assert submit_all(batcher, list(range(32))) == [2 * i for i in range(32)]
    assert sorted(i for batch in run.batches for i in batch) == list(range(32))  # each item run exactly once
    assert max(len(b) for b in run.batches) > 1 and len(run.batches) < 32
    assert all(len(b) <= 8 for b in run.batches)


def test_a_full_batch_runs_without_waiting_out_the_window():
    run = Doubler()
    batcher = MicroBatcher(run, threading.Lock(), BatchSettings(window_ms=600_000, max_batch=4))
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = [pool.submit(batcher.submit, i) for i in range(4)]
        assert sorted(f.result(timeout=30) for f in futures) == [0, 2, 4, 6]  # a 10-minute window would time out
    assert run.batches and len(run.batches[0]) == 4


def test_requests_arriving_during_a_batch_join_the_next_one():
    gate = threading.Event()
    run = Doubler(gate)
    batcher = MicroBatcher(run, threading.Lock(), BatchSettings(window_ms=0, max_batch=64))  # no waiting at all
    with ThreadPoolExecutor(max_workers=9) as pool:
        first = pool.submit(batcher.submit, 0)
        deadline = time.monotonic() + 30
        while not run.batches and time.monotonic() < deadline:  # the first batch is running (held at the gate)
            threading.Event().wait(0.01)
        later = [pool.submit(batcher.submit, i) for i in range(1, 9)]
        deadline = time.monotonic() + 30
        while len(batcher._waiting) < 8 and time.monotonic() < deadline:  # all 8 queued behind the running batch
            threading.Event().wait(0.01)
        gate.set()
        assert first.result(timeout=30) == 0 and [f.result(timeout=30) for f in later] == [2 * i for i in range(1, 9)]
    assert run.batches[0] == [0] and sorted(run.batches[1]) == list(range(1, 9))


def test_max_batch_one_runs_every_request_alone():
    run = Doubler()
    batcher = MicroBatcher(run, threading.Lock(), BatchSettings(window_ms=100, max_batch=1))
    assert submit_all(batcher, list(range(10))) == [2 * i for i in range(10)]
    assert all(len(b) == 1 for b in run.batches) and len(run.batches) == 10


def test_a_failing_batch_answers_each_of_its_requests_with_the_error_and_the_next_batch_still_runs():
    run = Doubler(fail_on=3)
    batcher = MicroBatcher(run, threading.Lock(), BatchSettings(window_ms=100, max_batch=64))
    answers = submit_all(batcher, list(range(8)))
    failed = next(b for b in run.batches if 3 in b)
    assert all(answers[i] == "cannot take 3" for i in failed)
    assert all(answers[i] == 2 * i for i in range(8) if i not in failed)
    assert batcher.submit(5) == 10
    with pytest.raises(ValueError, match="cannot take 3"):
        batcher.submit(3)


def test_a_short_answer_is_an_error_not_a_hang():
    batcher = MicroBatcher(lambda items: [0], threading.Lock(), BatchSettings(window_ms=600_000, max_batch=4))
    answers = submit_all(batcher, [1, 2, 3, 4], threads=4)  # one full batch of 4, one result
    assert all("shorter" in a for a in answers)


def test_a_leader_whose_wait_fails_still_runs_its_batch_and_hands_on_leadership(monkeypatch):
    run = Doubler()
    batcher = MicroBatcher(run, threading.Lock(), BatchSettings(window_ms=50, max_batch=8))
    real_wait = batcher._changed.wait
    calls = []

    def failing_once(timeout=None):
        calls.append(timeout)
        if len(calls) == 1:
            raise OverflowError("timeout value is too large")
        return real_wait(timeout)

    monkeypatch.setattr(batcher._changed, "wait", failing_once)
    with pytest.raises(OverflowError):
        batcher.submit(1)
    assert run.batches == [[1]] and not batcher._has_leader  # its batch ran; no leader is left behind
    assert submit_all(batcher, [2, 3], threads=2) == [4, 6]  # and the next requests do not hang


@pytest.mark.parametrize("max_batch", [1, 2])
def test_an_encoder_with_two_slots_runs_two_batches_at_once_and_never_three(max_batch):
    """An encoder with two slots (BatchSettings.parallel): while one batch runs, the next one is formed and runs
    beside it; a third waits for a slot. Each request alone (max_batch 1), and gathered (the leader's hand-off)."""
    running, most, lock, release = [0], [0], threading.Lock(), threading.Event()

    def run(items):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        release.wait(10)
        with lock:
            running[0] -= 1
        return [2 * i for i in items]

    batcher = MicroBatcher(run, threading.BoundedSemaphore(2), BatchSettings(window_ms=0, max_batch=max_batch))
    with ThreadPoolExecutor(max_workers=6) as pool:
        futures = [pool.submit(batcher.submit, i) for i in range(6)]
        deadline = time.monotonic() + 10
        while most[0] < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)  # a third batch, were it let in, would start now
        assert most[0] == 2
        release.set()
        assert sorted(f.result(timeout=30) for f in futures) == [0, 2, 4, 6, 8, 10]
    assert most[0] == 2


def test_slots_and_threads_follow_the_encoders_runtime(monkeypatch):
    """Two slots of one torch thread each on two cores; an exported model (one infer request) and BM25 (no encoder)
    one slot on torch's own threads."""
    from types import SimpleNamespace

    from cone.encoders.base import TORCH, Runtime
    from cone.service import registry

    monkeypatch.setattr(registry, "usable_cores", lambda: 2)
    torch_index = SimpleNamespace(encoder=SimpleNamespace(runtime=TORCH))
    exported = SimpleNamespace(encoder=SimpleNamespace(runtime=Runtime("openvino")))
    bm25 = SimpleNamespace()
    two, one = BatchSettings(parallel=2), BatchSettings(parallel=1)
    assert isinstance(registry.encoder_slots(torch_index, two), threading.BoundedSemaphore)
    assert registry.batch_threads(torch_index, two) == 1
    for index, settings in ((exported, two), (bm25, two), (torch_index, one)):
        assert not isinstance(registry.encoder_slots(index, settings), threading.BoundedSemaphore)
        assert registry.batch_threads(index, settings) is None


def test_torch_threads_are_set_for_the_block_and_set_back():
    import torch

    from cone.encoders import base
    from cone.encoders.base import torch_threads

    saved = torch.get_num_threads()
    torch.set_num_threads(2)  # under pytest-xdist a worker has 1 (tests/conftest.py): 1 could not tell a wrong restore
    base._torch_default_threads.cache_clear()
    try:
        _overlapping_blocks_leave_the_process_count(torch, torch_threads, before=2)
    finally:
        torch.set_num_threads(saved)
        base._torch_default_threads.cache_clear()


def _overlapping_blocks_leave_the_process_count(torch, torch_threads, before: int) -> None:
    with torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with torch_threads(None):
        assert torch.get_num_threads() == before

    # Two batches that overlap, the first in leaving first: a thread started afterwards has the process's count.
    inside, first_out = threading.Barrier(2), threading.Event()

    def batch(leaves_first: bool) -> None:
        with torch_threads(1):
            inside.wait(10)
            if not leaves_first:
                first_out.wait(10)
        if leaves_first:
            first_out.set()

    workers = [threading.Thread(target=batch, args=(first,)) for first in (True, False)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(10)
    seen = []
    later = threading.Thread(target=lambda: seen.append(torch.get_num_threads()))
    later.start()
    later.join(10)
    assert seen == [before]
