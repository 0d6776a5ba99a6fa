"""DataPrefetcher's producer thread (background=True, the default with a decoder): the
same batches as the synchronous path, nothing overwritten while held, errors at their
batch's turn, no thread left behind, resume through it."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import threading
import time

import cv2
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn
from torch.utils.data import Dataset

from common_utils import cpu_and_cuda
from fastload import DataPrefetcher, FastLoader, gpu
from fastload.collate import encoded_collate
from fastload.decode import GPUDecoder
from fastload.producer import Producer
from fastload.testing.synthetic import photo_like_image


class EncodedPhotos(Dataset):
    """``length`` JPEGs of varied sizes, as bytes, with their index as the label; the
    sample at ``bad`` is not an image."""

    def __init__(self, length: int = 24, bad: int | None = None) -> None:
        self.length, self.bad = length, bad

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if index == self.bad:
            return torch.frombuffer(bytearray(b"not a jpeg at all"), dtype=torch.uint8), index
        rng = np.random.default_rng(index)
        bgr = photo_like_image(rng, 24 + index % 5 * 4, 32 + index % 3 * 8)
        return torch.from_numpy(cv2.imencode(".jpg", bgr)[1].reshape(-1).copy()), index


def prefetcher(
    background: bool, dataset: Dataset | None = None, shuffle=True, device: str = "cpu"
) -> DataPrefetcher:
    loader = FastLoader(
        EncodedPhotos() if dataset is None else dataset, batch_size=4, shuffle=shuffle, seed=7,
        collate_fn=encoded_collate, num_workers=0, pin_memory=device == "cuda",
    )  # fmt: skip
    return DataPrefetcher(
        loader, device, decoder=GPUDecoder(16, device=device), background=background,
        transform=nn.Sequential(gpu.RandomHorizontalFlip(), gpu.ColorJitter(0.4, 0.4)),
        mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25),
    )  # fmt: skip


def producer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "fastload-producer"]


def no_producer_left(timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s  # a bound, not a measurement
    while producer_threads() and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.01)
    return not producer_threads()


def test_a_decoder_runs_in_the_background_by_default():
    assert prefetcher(background=None).background  # type: ignore[arg-type]
    assert not DataPrefetcher([torch.zeros(1)], "cpu").background


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_the_background_gives_the_synchronous_batches_batch_for_batch(device):
    for epoch in range(2):
        threaded = list(prefetcher(True, device=device))
        synchronous = list(prefetcher(False, device=device))
        assert [labels.tolist() for _, labels in threaded] == [
            labels.tolist() for _, labels in synchronous
        ]
        for (a, _), (b, _) in zip(threaded, synchronous, strict=True):
            assert torch.equal(a, b), f"epoch {epoch}"
    assert no_producer_left()


@pytest.mark.parametrize("device", cpu_and_cuda())
@given(held=st.sets(st.integers(0, 5)))
def test_a_batch_held_is_never_overwritten(device, held):
    copies, kept = {}, {}
    for index, (images, labels) in enumerate(prefetcher(True, device=device)):
        if index in held:
            kept[index], copies[index] = (images, labels), (images.clone(), labels.clone())
    for index, (images, labels) in kept.items():
        assert torch.equal(images, copies[index][0]) and torch.equal(labels, copies[index][1])


def test_a_bad_sample_is_raised_at_its_batch_naming_it_and_the_pass_goes_on():
    batches = prefetcher(True, EncodedPhotos(bad=13), shuffle=False)
    got, passes = 0, iter(batches)
    with pytest.raises(Exception, match="image 1 of the batch") as raised:
        for _ in passes:
            got += 1
    assert got == 3  # samples 12..15: the batches before it were all handed out
    assert "preparing batch 3 of the pass" in str(raised.value.__notes__)
    assert len(list(passes)) == len(batches) - 4  # as DataLoader: on after a failed batch
    del raised, passes, batches  # (the traceback holds the pass, as DataLoader's iterator)
    gc.collect()
    assert no_producer_left()


def test_breaking_out_of_the_loop_stops_the_thread():
    batches = prefetcher(True)
    for index, _ in enumerate(batches):
        if index == 1:
            break
    assert no_producer_left()
    assert [labels.tolist() for _, labels in batches]  # the next pass starts afresh


def test_an_exception_in_the_loop_body_stops_the_thread():
    with pytest.raises(ZeroDivisionError):
        for _ in prefetcher(True):
            1 / 0  # noqa: B018
    assert no_producer_left()


def test_a_prefetcher_dropped_mid_epoch_stops_its_thread():
    batches = prefetcher(True)
    batches.next()  # apex's protocol: a pass with no iterator of the caller's
    assert producer_threads()
    del batches
    assert no_producer_left()


def test_interpreter_exit_mid_epoch_is_clean():
    script = textwrap.dedent(
        """
        import torch
        from fastload import DataPrefetcher

        def slow():
            for i in range(10**9):
                yield torch.full((2, 3, 4, 4), i % 256, dtype=torch.uint8)

        batches = DataPrefetcher(slow(), "cpu", background=True, depth=3)
        it = iter(batches)
        next(it)
        print("took one")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "took one" and not done.stderr


@pytest.mark.parametrize("device", cpu_and_cuda())
def test_resume_through_the_background_yields_the_remaining_batches(device):
    whole = [(images.cpu(), labels.tolist()) for images, labels in prefetcher(True, device=device)]
    first = prefetcher(True, device=device)
    it = iter(first)
    for _ in range(2):
        next(it)
    state = first.state_dict()
    del it, first
    resumed = prefetcher(True, device=device)
    resumed.load_state_dict(state)
    rest = [(images.cpu(), labels.tolist()) for images, labels in resumed]
    assert [labels for _, labels in rest] == [labels for _, labels in whole[2:]]
    for (images, _), (expected, _) in zip(rest, whole[2:], strict=True):
        assert torch.equal(images, expected)  # the same crops, flips and jitter again
    assert producer_threads()  # reading the next epoch, begun as this one ended
    del resumed
    assert no_producer_left()


def test_the_producer_queues_at_most_depth_ahead():
    taken = []

    def batches():
        for i in range(10):
            taken.append(i)
            yield i

    producer = Producer(batches(), lambda x: (x, None), depth=2)
    deadline = time.monotonic() + 10
    while len(taken) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)
    assert len(taken) == 3  # two queued, one waiting for room
    assert [producer.get().value for _ in range(10)] == list(range(10))
    assert producer.get().end
    producer.close()
    assert not producer.alive


def test_a_decoder_that_finishes_the_batch_is_not_normalised_twice():
    loader = FastLoader(EncodedPhotos(8), batch_size=4, collate_fn=encoded_collate, num_workers=0)
    finishing = GPUDecoder(16, device="cpu", crop="center", mean=(0.5,) * 3, std=(0.25,) * 3,
                           dtype=torch.bfloat16, channels_last=True)  # fmt: skip
    plain = GPUDecoder(16, device="cpu", crop="center")
    finished = list(DataPrefetcher(loader, "cpu", decoder=finishing))
    reference = list(
        DataPrefetcher(
            loader,
            "cpu",
            decoder=plain,
            mean=(0.5,) * 3,
            std=(0.25,) * 3,
            dtype=torch.bfloat16,
            channels_last=True,
        )
    )
    for (a, _), (b, _) in zip(finished, reference, strict=True):
        assert a.dtype == torch.bfloat16 and a.is_contiguous(memory_format=torch.channels_last)
        assert (a.float() - b.float()).abs().max() <= 1 / 255 / 0.25 + 2 * 2**-6  # a level, 2 ulps
    with pytest.raises(ValueError, match="already finishes the batch"):
        DataPrefetcher(loader, "cpu", decoder=finishing, mean=(0.5,) * 3, std=(0.25,) * 3)


def test_a_finishing_decoder_owns_the_finish_and_the_prefetcher_says_so():
    loader = FastLoader(EncodedPhotos(4), batch_size=4, collate_fn=encoded_collate, num_workers=0)
    half = GPUDecoder(16, device="cpu", mean=(0.5,) * 3, std=(0.25,) * 3, dtype=torch.float16)
    prefetcher = DataPrefetcher(loader, "cpu", decoder=half)
    assert (prefetcher.dtype, prefetcher.channels_last) == (torch.float16, False)
    assert "dtype=torch.float16" in repr(prefetcher) and "channels_last=False" in repr(prefetcher)
    ((images, _),) = list(prefetcher)
    assert images.dtype == torch.float16
    assert DataPrefetcher(loader, "cpu", decoder=half, dtype=torch.float16).dtype == torch.float16
    with pytest.raises(ValueError, match=r"dtype=torch.float32\) but its decoder finishes the "
                       r"batch as torch.float16: give the dtype to the decoder alone"):  # fmt: skip
        DataPrefetcher(loader, "cpu", decoder=half, dtype=torch.float32)
    with pytest.raises(ValueError, match="channels_last=True\\) but its decoder finishes"):
        DataPrefetcher(loader, "cpu", decoder=half, channels_last=True)
    # a decoder that does not finish (uint8 out) leaves the finish to the prefetcher
    plain = DataPrefetcher(loader, "cpu", decoder=GPUDecoder(16, device="cpu"))
    ((images, _),) = list(plain)
    assert plain.dtype == torch.float32 and images.dtype == torch.float32
    assert DataPrefetcher(loader, "cpu").dtype == torch.float32


def epochs_of(batches: DataPrefetcher, epochs: int, between=None) -> list[list[list[int]]]:
    got = []
    for epoch in range(epochs):
        if between is not None:
            between(epoch)
        got.append([labels.tolist() for _, labels in batches])
    return got


@pytest.mark.parametrize("workers", [0, 2])
def test_one_producer_reads_every_epoch_and_begins_the_next_as_one_ends(workers):
    def make(background):
        loader = FastLoader(
            EncodedPhotos(), batch_size=4, shuffle=True, seed=7, num_workers=workers,
            persistent_workers=workers > 0, collate_fn=encoded_collate,
        )  # fmt: skip
        decoder, flip = GPUDecoder(16, device="cpu"), gpu.RandomHorizontalFlip()
        prefetcher = DataPrefetcher(
            loader, "cpu", decoder=decoder, background=background, transform=flip
        )
        return loader, prefetcher

    loader, batches = make(True)
    threads = []
    passes = []
    for _ in range(3):
        it = iter(batches)
        images = [next(it) for _ in range(6)]  # the epoch's six batches
        # the last one handed out: the next epoch is begun, and its batches counted from 0
        assert (loader.state_dict()["epoch"], loader.state_dict()["batches"]) == (
            len(passes) + 1,
            0,
        )
        threads.append(producer_threads())
        with pytest.raises(StopIteration):
            next(it)
        passes.append(images)
    assert len(threads[0]) == 1 and threads[0] == threads[1] == threads[2]  # one thread
    _, synchronous = make(False)
    for epoch in passes:
        expected = list(synchronous)
        for (image, labels), (want, want_labels) in zip(epoch, expected, strict=True):
            assert labels.tolist() == want_labels.tolist() and torch.equal(image, want)
    del batches, it
    assert no_producer_left()


def test_a_loop_that_sets_its_samplers_epoch_gets_that_epochs_order():
    from torch.utils.data import DistributedSampler

    def make(background):
        data = EncodedPhotos()
        sampler = DistributedSampler(data, num_replicas=1, rank=0, shuffle=True, seed=3)
        loader = FastLoader(data, batch_size=4, sampler=sampler, num_workers=0,
                            collate_fn=encoded_collate)  # fmt: skip
        prefetcher = DataPrefetcher(loader, "cpu", decoder=GPUDecoder(16, device="cpu"),
                                    background=background)  # fmt: skip
        return sampler, prefetcher

    sampler, batches = make(True)
    got = epochs_of(batches, 3, between=lambda epoch: sampler.set_epoch(10 * epoch))
    sampler, synchronous = make(False)
    want = epochs_of(synchronous, 3, between=lambda epoch: sampler.set_epoch(10 * epoch))
    assert got == want and got[1] != got[2]  # the epoch begun ahead was begun again


def test_a_state_saved_at_an_epochs_end_resumes_the_next_epoch_exactly():
    whole = epochs_of(prefetcher(True), 2)
    first = prefetcher(True)
    it = iter(first)
    for _ in range(6):
        next(it)  # the whole of epoch 0: epoch 1 begun ahead
    state = first.state_dict()
    assert (state["epoch"], state["batches"], state["between_epochs"]) == (1, 0, False)
    assert first.loader.state_dict() == state
    resumed = prefetcher(True)
    resumed.load_state_dict(state)
    assert [labels.tolist() for _, labels in resumed] == whole[1]


def test_a_loader_iterated_or_loaded_elsewhere_drops_the_epoch_begun_ahead():
    batches = prefetcher(True)
    reference = epochs_of(prefetcher(True), 3)
    assert [labels.tolist() for _, labels in batches] == reference[0]
    assert producer_threads()  # epoch 1 begun ahead
    direct = [labels.tolist() for _, labels in batches.loader]  # epoch 1, without it
    assert direct == reference[1]
    assert no_producer_left()  # what it had begun is dropped, not read twice
    assert [labels.tolist() for _, labels in batches] == reference[2]

    state = batches.loader.state_dict()  # after epoch 2, epoch 3 begun ahead
    assert producer_threads()
    batches.loader.load_state_dict(state)
    assert no_producer_left()


def test_with_a_plan_the_reading_thread_plans_the_next_batch_while_one_is_prepared():
    planned_second = threading.Event()
    threads: dict[str, set[str]] = {"plan": set(), "prepare": set()}

    def plan(batch):
        threads["plan"].add(threading.current_thread().name)
        if batch == 1:
            planned_second.set()
        return batch * 10

    def prepare(planned):
        threads["prepare"].add(threading.current_thread().name)
        if planned == 0:  # batch 0's decode outlasts the planning of batch 1
            assert planned_second.wait(timeout=30), "batch 1 was not planned during batch 0"
        return planned + 1, None

    producer = Producer(iter(range(5)), prepare, depth=2, plan=plan)
    assert [producer.get().value for _ in range(5)] == [1, 11, 21, 31, 41]
    assert producer.get().end
    assert threads == {"plan": {"fastload-producer"}, "prepare": {"fastload-producer-device"}}
    producer.close()
    assert not producer.alive


@pytest.mark.parametrize("stage", ["plan", "prepare"])
def test_an_error_in_either_stage_comes_at_its_batchs_turn_and_the_rest_follow(stage):
    def fail_at_two(x):
        if x == 2:
            raise ValueError(f"{stage} failed")
        return x

    plan = fail_at_two if stage == "plan" else (lambda x: x)
    prepare = (lambda x: (fail_at_two(x), None)) if stage == "prepare" else (lambda x: (x, None))
    producer = Producer(iter(range(5)), prepare, depth=2, plan=plan)
    items = list(producer)
    assert [item.value for item in items] == [0, 1, None, 3, 4, None]
    assert str(items[2].error) == f"{stage} failed" and items[-1].end
    assert all(item.error is None for item in items[3:])
    producer.follow_with(None)  # no epoch follows: the threads end
    producer.close()
    assert not producer.alive


class PlanningDecoder:
    """Decodes like GPUDecoder on the CPU, its host part apart: records the threads."""

    def __init__(self) -> None:
        self.inner = GPUDecoder(16, device="cpu", flip=0.5)
        self.threads: dict[str, set[str]] = {"plan": set(), "run": set()}

    def plan(self, encoded):
        self.threads["plan"].add(threading.current_thread().name)
        from fastload.gpu.base import draw_uniform

        return encoded, draw_uniform(len(encoded), device=torch.device("cpu"))  # keyed draw

    def run(self, plan):
        self.threads["run"].add(threading.current_thread().name)
        encoded, draws = plan
        batch = self.inner(encoded)
        return batch + (draws > 0.5).view(-1, 1, 1, 1).to(torch.uint8)

    def __call__(self, encoded):
        return self.run(self.plan(encoded))


def test_a_decoder_that_plans_is_planned_on_the_reading_thread_with_the_same_keyed_draws():
    def make(background):
        loader = FastLoader(EncodedPhotos(), batch_size=4, shuffle=True, seed=7, num_workers=0,
                            collate_fn=encoded_collate)  # fmt: skip
        decoder = PlanningDecoder()
        prefetcher = DataPrefetcher(loader, "cpu", decoder=decoder, background=background,
                                    transform=gpu.RandomHorizontalFlip(), dtype=None)  # fmt: skip
        return decoder, prefetcher

    decoder, batches = make(True)
    got = [images for images, _ in batches]
    assert decoder.threads == {"plan": {"fastload-producer"}, "run": {"fastload-producer-device"}}
    _, synchronous = make(False)
    want = [images for images, _ in synchronous]
    assert len(got) == len(want) == 6
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
