"""from_hf / HFImageDataset: a Hugging Face image set read bytes first, in every form the
library stores it, a batch in one Arrow read, with keyed seeds and resume."""

from __future__ import annotations

import pickle
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torchvision import tv_tensors

datasets = pytest.importorskip("datasets")

from fastload import FastLoader, make_image_folder  # noqa: E402
from fastload.datasets import HFImageDataset, from_hf  # noqa: E402
from fastload.decode.opencv import ImageDecodeError, decode_image  # noqa: E402
from fastload.seeds import (  # noqa: E402
    loading_seeds,
    sample_seed,
    seed_generators,
)
from fastload.transforms import DecodeRandomResizedCrop  # noqa: E402


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return make_image_folder(
        tmp_path_factory.mktemp("hf"), num_classes=2, images_per_class=5, size=(64, 48)
    )


@pytest.fixture(scope="module")
def files(folder) -> list[tuple[str, int]]:
    """(path, label) in imagefolder's order: sorted paths, class by folder."""
    paths = sorted(folder.glob("*/*.jpg"))
    return [(str(path), int(path.parent.name[-2:])) for path in paths]


def from_dict(files, *, as_bytes: bool):
    images = [Path(p).read_bytes() if as_bytes else p for p, _ in files]
    labels = [label for _, label in files]
    return datasets.Dataset.from_dict({"image": images, "label": labels}).cast_column(
        "image", datasets.Image()
    )


def build(form: str, folder: Path, files, tmp_path: Path):
    """The same images and labels in one of the forms a user's set comes in."""
    if form == "imagefolder":  # paths only, bytes None
        return datasets.load_dataset("imagefolder", data_dir=str(folder), split="train")
    if form in ("dict of bytes", "dict of paths"):
        return from_dict(files, as_bytes=form == "dict of bytes")
    if form == "disk":
        from_dict(files, as_bytes=True).save_to_disk(str(tmp_path / "saved"))
        return datasets.load_from_disk(str(tmp_path / "saved"))
    assert form == "parquet"
    whole = from_dict(files, as_bytes=False)
    shards = []
    for shard in range(2):
        path = tmp_path / f"part-{shard}.parquet"
        whole.shard(2, shard, contiguous=True).to_parquet(str(path))  # embeds the bytes
        shards.append(str(path))
    return datasets.load_dataset("parquet", data_files=shards, split="train")


FORMS = ["imagefolder", "dict of bytes", "dict of paths", "disk", "parquet"]


@pytest.mark.parametrize("form", FORMS)
def test_every_storage_form_gives_the_files_pixels_and_labels(form, folder, files, tmp_path):
    dataset = from_hf(build(form, folder, files, tmp_path))
    assert len(dataset) == len(files)
    for index, (path, label) in enumerate(files):
        image, got = dataset[index]
        assert got == label
        np.testing.assert_array_equal(image, decode_image(Path(path).read_bytes()))
    batch = dataset.__getitems__([3, 0, 9])
    assert [label for _, label in batch] == [files[i][1] for i in (3, 0, 9)]


def test_the_users_dataset_keeps_decoding_and_a_raw_one_is_taken_as_it_is(files):
    decoding = from_dict(files, as_bytes=True)
    from_hf(decoding)
    assert decoding.features["image"].decode  # not mutated
    assert hasattr(decoding[0]["image"], "size")  # still a PIL image for the user
    raw = decoding.cast_column("image", datasets.Image(decode=False))
    image, label = from_hf(raw)[2]
    np.testing.assert_array_equal(image, decode_image(Path(files[2][0]).read_bytes()))
    assert label == files[2][1]


def test_classes_come_from_the_class_label(folder):
    dataset = from_hf(datasets.load_dataset("imagefolder", data_dir=str(folder), split="train"))
    assert dataset.classes == ["class_00", "class_01"]
    assert dataset.class_to_idx == {"class_00": 0, "class_01": 1}


def test_decode_modes_and_min_size(files):
    hf = from_dict(files, as_bytes=True)
    data = Path(files[1][0]).read_bytes()
    tensor, _ = from_hf(hf, decode="tensor")[1]
    assert tensor.dtype == torch.uint8 and tensor.shape == (3, 48, 64)
    np.testing.assert_array_equal(tensor.permute(1, 2, 0).numpy(), decode_image(data))
    encoded, _ = from_hf(hf, decode=None)[1]
    assert encoded.dtype == torch.uint8 and encoded.numpy().tobytes() == data
    small, _ = from_hf(hf, min_size=20)[1]
    assert small.shape == (24, 32, 3)  # decoded at 1/2 inside libjpeg
    cropped, _ = from_hf(hf, decode=None, transform=DecodeRandomResizedCrop(16))[1]
    assert cropped.shape == (3, 16, 16)


def test_without_a_label_column(files):
    hf = from_dict(files, as_bytes=True).remove_columns("label")
    image, label = from_hf(hf, label=None)[0]
    assert label is None and image.shape == (48, 64, 3)


def test_transforms_and_target_transform_run(files):
    hf = from_dict(files, as_bytes=True)
    dataset = from_hf(hf, transform=lambda image: image.shape, target_transform=lambda y: -y)
    assert dataset[7] == ((48, 64, 3), -files[7][1])


def detection_set(files, *, as_list: bool):
    objects = [
        {"bbox": [[1.0, 2.0, 10.0, 20.0], [30.0, 5.0, 4.0, 8.0]], "category": [1, 0],
         "area": [200.0, 32.0]},
        {"bbox": [], "category": [], "area": []},
    ]  # fmt: skip
    obj = {"bbox": datasets.List(datasets.Value("float32"), length=4),
           "category": datasets.ClassLabel(names=["coverall", "mask"]),
           "area": datasets.Value("float32")}  # fmt: skip
    column = (
        [[dict(zip(o, values, strict=True)) for values in zip(*o.values(), strict=True)]
         for o in objects]
        if as_list else objects
    )  # fmt: skip
    lists = datasets.List(obj) if as_list else {k: datasets.List(v) for k, v in obj.items()}
    features = datasets.Features(
        {"image": datasets.Image(), "image_id": datasets.Value("int64"), "objects": lists}
    )
    images = [Path(p).read_bytes() for p, _ in files[:2]]
    return datasets.Dataset.from_dict(
        {"image": images, "image_id": [17, 18], "objects": column}, features=features
    )


@pytest.mark.parametrize("as_list", [False, True], ids=["dict of lists", "list of dicts"])
def test_coco_style_objects_become_lmdb_style_targets(files, as_list):
    dataset = from_hf(detection_set(files, as_list=as_list), label="objects")
    _, target = dataset[0]
    assert set(target) == {"boxes", "labels", "area", "image_id"}
    boxes = target["boxes"]
    assert isinstance(boxes, tv_tensors.BoundingBoxes)
    assert boxes.format == tv_tensors.BoundingBoxFormat.XYXY and boxes.canvas_size == (48, 64)
    assert boxes.tolist() == [[1, 2, 11, 22], [30, 5, 34, 13]]  # from COCO's XYWH
    assert target["labels"].tolist() == [1, 0] and target["labels"].dtype == torch.int64
    assert target["area"].dtype == torch.float32 and int(target["image_id"]) == 17
    assert dataset.classes == ["coverall", "mask"]
    _, empty = dataset[1]
    assert empty["boxes"].shape == (0, 4) and empty["labels"].shape == (0,)


def test_detection_targets_go_through_torchvision_v2(files):
    from torchvision.transforms import v2

    flip = v2.RandomHorizontalFlip(p=1.0)
    dataset = from_hf(detection_set(files, as_list=False), label="objects", decode="tensor",
                      transforms=flip)  # fmt: skip
    image, target = dataset[0]
    assert image.shape == (3, 48, 64)
    assert target["boxes"].tolist()[0] == [64 - 11, 2, 64 - 1, 22]


def test_bad_columns_and_sets_are_refused_saying_what_there_is(files, folder):
    hf = from_dict(files, as_bytes=True)
    columns = "its columns: 'image', 'label'"
    with pytest.raises(ValueError, match=rf"image column 'img' is not in the dataset; {columns}$"):
        from_hf(hf, image="img")
    with pytest.raises(ValueError, match=rf"label column 'y' is not in .*{columns}; label=None"):
        from_hf(hf, label="y")
    with pytest.raises(ValueError, match=r"image column 'label' is a \w+, not an Image feature"):
        from_hf(hf, image="label")
    streaming = datasets.load_dataset("imagefolder", data_dir=str(folder), split="train",
                                      streaming=True)  # fmt: skip
    with pytest.raises(TypeError, match=r"IterableDataset .* load the set without streaming"):
        from_hf(streaming)
    with pytest.raises(TypeError, match=r"a DatasetDict of splits \['train'\]; pick one"):
        from_hf(datasets.DatasetDict({"train": hf}))
    with pytest.raises(TypeError, match=r"expected a datasets\.Dataset, got list"):
        from_hf([1, 2])
    with pytest.raises(ValueError, match="min_size decodes images smaller"):
        from_hf(detection_set(files, as_list=False), label="objects", min_size=8)
    with pytest.raises(ValueError, match="box_format must be one of"):
        from_hf(hf, box_format="xywh")
    with pytest.raises(IndexError, match="index 10 is out of range for 10 rows"):
        from_hf(hf)[10]


def test_a_corrupt_image_names_its_row_and_file(files, tmp_path):
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(Path(files[0][0]).read_bytes()[:300])
    hf = datasets.Dataset.from_dict({"image": [files[1][0], str(broken)], "label": [0, 1]})
    dataset = from_hf(hf.cast_column("image", datasets.Image()))
    with pytest.raises(
        ImageDecodeError, match=rf"^row 1 \({broken}\): not an image OpenCV can decode"
    ):
        dataset[1]
    embedded = datasets.Dataset.from_dict({"image": [b"not a jpeg"], "label": [0]})
    with pytest.raises(ImageDecodeError, match=r"^row 0: not an image"):
        from_hf(embedded.cast_column("image", datasets.Image()))[0]
    missing = datasets.Dataset.from_dict({"image": [str(tmp_path / "gone.jpg")], "label": [0]})
    with pytest.raises(FileNotFoundError) as error:
        from_hf(missing.cast_column("image", datasets.Image()))[0]
    assert "reading the image of row 0" in error.value.__notes__[0]


def test_a_batch_is_one_arrow_read(files, monkeypatch):
    """Counted where every Dataset read goes (``query_table``): a regression to a read per
    row makes it the batch size."""
    import datasets.arrow_dataset as arrow_dataset

    reads = []
    real = arrow_dataset.query_table
    monkeypatch.setattr(
        arrow_dataset, "query_table", lambda *a, **k: reads.append(a[1]) or real(*a, **k)
    )
    dataset = from_hf(from_dict(files, as_bytes=True), decode=None)
    dataset.__getitems__([4, 1, 8, 0, 2])
    assert reads == [[4, 1, 8, 0, 2]]
    reads.clear()
    for seed in (None, 0):  # a seeded loader too: one batch call, the rows' seeds inside
        reads.clear()
        loader = FastLoader(dataset, batch_size=4, num_workers=0, collate_fn=list, seed=seed)
        assert len(list(loader)) == len(reads) == 3


@given(st.lists(st.integers(-10, 9), max_size=12))
def test_a_batch_is_its_rows_read_one_by_one(batch_dataset, indices):
    got = batch_dataset.__getitems__(indices)
    want = [batch_dataset[i] for i in indices]
    assert [label for _, label in got] == [label for _, label in want]
    assert all(torch.equal(a, b) for (a, _), (b, _) in zip(got, want, strict=True))


@pytest.fixture(scope="module")
def batch_dataset(files) -> HFImageDataset:
    return from_hf(from_dict(files, as_bytes=True), decode=None)


def test_it_pickles_for_spawned_workers(batch_dataset):
    copy = pickle.loads(pickle.dumps(batch_dataset))
    assert torch.equal(copy[3][0], batch_dataset[3][0]) and copy[3][1] == batch_dataset[3][1]


class Augment:
    """A crop (Python's random) and noise (torch's and NumPy's): every generator drawn."""

    def __init__(self) -> None:
        self.crop = DecodeRandomResizedCrop(24)

    def __call__(self, data: torch.Tensor) -> torch.Tensor:
        image = self.crop(data).float()
        return image + torch.rand(()) + float(np.random.rand())


def seeded_set(files) -> HFImageDataset:
    hf = from_dict(files, as_bytes=True)
    hf = hf.add_column("index", list(range(len(files))))  # the label: which row it was
    return from_hf(hf, label="index", transform=Augment(), decode=None)


def test_a_seeded_batch_draws_each_rows_own_key(files):
    """Given the batch's keyed seeds, ``__getitems__`` decodes row i from seeds[i] alone:
    the same draws as that row loaded by itself with its generators seeded so."""
    dataset = seeded_set(files)
    indices = [5, 2, 7]
    seeds = [sample_seed(7, 0, i) for i in indices]
    with loading_seeds(seeds):
        batch = dataset.__getitems__(indices)
    for (image, index), seed in zip(batch, seeds, strict=True):
        seed_generators(seed)
        alone, _ = dataset[index]
        assert torch.equal(image, alone)


def seeded_epoch(dataset, workers: int, batch_size: int) -> dict[int, torch.Tensor]:
    loader = FastLoader(dataset, batch_size=batch_size, shuffle=True, seed=7,
                        num_workers=workers, persistent_workers=False)  # fmt: skip
    return {
        int(i): image
        for images, indices in loader
        for image, i in zip(images, indices, strict=True)
    }


@pytest.mark.slow  # worker processes
def test_a_seeded_loader_gives_each_row_its_draws_whatever_the_workers_and_batch(files):
    dataset = seeded_set(files)
    reference = seeded_epoch(dataset, 0, 4)
    assert sorted(reference) == list(range(len(files)))
    for workers, batch_size in [(0, 5), (2, 4), (2, 5)]:
        epoch = seeded_epoch(dataset, workers, batch_size)
        assert all(torch.equal(epoch[i], reference[i]) for i in reference), (workers, batch_size)


@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.slow)])
def test_a_resumed_epoch_is_the_rest_of_the_interrupted_one(files, workers):
    dataset = seeded_set(files)

    def make() -> FastLoader:
        return FastLoader(dataset, batch_size=3, shuffle=True, seed=11, num_workers=workers,
                          persistent_workers=False)  # fmt: skip

    whole = [(images, indices.tolist()) for images, indices in make()]
    interrupted = make()
    batches = iter(interrupted)
    for _ in range(2):
        next(batches)
    state = interrupted.state_dict()
    random.seed(999)
    torch.manual_seed(999)
    resumed = make()
    resumed.load_state_dict(state)
    rest = [(images, indices.tolist()) for images, indices in resumed]
    assert [i for _, i in rest] == [i for _, i in whole[2:]]
    assert all(torch.equal(a, b) for (a, _), (b, _) in zip(rest, whole[2:], strict=True))
