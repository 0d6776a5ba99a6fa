"""What every dataset of encoded images shares: the limits a user raises (or lowers) in
the main process travel with the dataset into the processes it is pickled into."""

from __future__ import annotations

import pickle

import pytest

from fastload import FastLoader, ImageFolder, make_image_folder
from fastload.decode import opencv
from fastload.decode.opencv import ImageDecodeError


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return make_image_folder(
        tmp_path_factory.mktemp("images"), num_classes=2, images_per_class=2, size=(64, 48)
    )


def test_the_pixel_limit_travels_with_a_pickled_dataset(folder, monkeypatch):
    monkeypatch.setattr(opencv, "MAX_PIXELS", 1000)
    sent = pickle.dumps(ImageFolder(folder))
    monkeypatch.setattr(opencv, "MAX_PIXELS", 178_956_970)  # as a fresh process has it
    received = pickle.loads(sent)
    assert opencv.MAX_PIXELS == 1000
    with pytest.raises(ImageDecodeError, match=r"64x48 is 3,072 pixels, over the limit of 1,000"):
        received[0]
    assert "_limits" not in vars(received)  # applied, not kept


@pytest.mark.slow
def test_the_pixel_limit_set_in_the_main_process_reaches_a_spawned_worker(folder, monkeypatch):
    # lowered, as a raised one is set: a worker at the default would decode these images
    monkeypatch.setattr(opencv, "MAX_PIXELS", 1000)
    loader = FastLoader(
        ImageFolder(folder), batch_size=2, num_workers=1, multiprocessing_context="spawn"
    )
    with pytest.raises(
        ImageDecodeError,
        match=r"(?s)in DataLoader worker process 0\..*"
        r"3,072 pixels, over the limit of 1,000",
    ):
        next(iter(loader))
    monkeypatch.setattr(opencv, "MAX_PIXELS", None)  # turned off, as the docs allow
    loader = FastLoader(
        ImageFolder(folder), batch_size=2, num_workers=1, multiprocessing_context="spawn"
    )
    assert [len(labels) for _, labels in loader] == [2, 2]
