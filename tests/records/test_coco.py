"""``fastload convert --annotations`` (COCO) and ``--masks`` (a folder of class masks):
what is stored, read back as torchvision's targets, and every bad input named."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import tv_tensors

from fastload.decode.opencv import decode_image
from fastload.lmdb import LMDBDataset
from fastload.testing.synthetic import photo_like_image
from fastload.tools.cli import main


def write_jpeg(path, height, width, seed):
    path.parent.mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(path), photo_like_image(np.random.default_rng(seed), height, width))
    return path


def blob(height, width):
    """A known irregular mask: an ellipse and a separate square."""
    mask = np.zeros((height, width), np.uint8)
    cv2.ellipse(mask, (20, 15), (12, 8), 30, 0, 360, 1, -1)
    mask[30:38, 40:50] = 1
    return mask


def rle_runs(mask):
    """COCO's uncompressed RLE counts: runs of 0s and 1s in column-major order, 0s first."""
    flat = mask.flatten(order="F")
    bounds = np.concatenate([[0], np.flatnonzero(np.diff(flat)) + 1, [flat.size]])
    return [0] * bool(flat[0]) + np.diff(bounds).tolist()


def rle_string(runs):
    """COCO's compressed RLE string of ``runs``, as pycocotools' rleToString writes it."""
    chars = []
    for index, value in enumerate(runs):
        value -= runs[index - 2] if index > 2 else 0
        more = True
        while more:
            code, value = value & 0x1F, value >> 5
            more = value != -1 if code & 0x10 else value != 0
            chars.append(chr((code | 0x20 * more) + 48))
    return "".join(chars)


@pytest.fixture
def coco_mask():
    return pytest.importorskip(
        "pycocotools.mask",
        reason="instance masks are rasterised by pycocotools (pip install '.[coco]')",
    )


@pytest.fixture
def coco(tmp_path):
    images = tmp_path / "images"
    write_jpeg(images / "a.jpg", 48, 64, 0)
    write_jpeg(images / "b.jpg", 40, 40, 1)
    write_jpeg(images / "sub" / "c.jpg", 50, 60, 2)
    counts = rle_string(rle_runs(blob(50, 60)))
    annotations = {
        "images": [
            {"id": 10, "file_name": "a.jpg", "height": 48, "width": 64},
            {"id": 20, "file_name": "b.jpg", "height": 40, "width": 40},
            {"id": 30, "file_name": "sub/c.jpg", "height": 50, "width": 60},
        ],
        "annotations": [
            {"id": 1, "image_id": 10, "category_id": 18, "bbox": [4, 6, 20, 10], "area": 200,
             "iscrowd": 0, "segmentation": [[4, 6, 24, 6, 24, 16, 4, 16]]},
            {"id": 2, "image_id": 30, "category_id": 1, "bbox": [8, 7, 42, 31], "area": 500,
             "iscrowd": 1, "segmentation": {"size": [50, 60], "counts": counts}},
            {"id": 3, "image_id": 10, "category_id": 90, "bbox": [30.5, 2, 10, 40.25],
             "area": 12.5, "iscrowd": 0, "segmentation": []},
        ],
        "categories": [{"id": 1, "name": "person"}, {"id": 18, "name": "dog"},
                       {"id": 90, "name": "toothbrush"}],
    }  # fmt: skip
    path = tmp_path / "instances.json"
    path.write_text(json.dumps(annotations))
    return images, path, annotations


def convert(*args):
    main(["convert", *map(str, args), "--workers", "0"])


def test_coco_boxes_labels_and_instance_masks_are_stored_as_torchvision_reads_them(
    coco, tmp_path, coco_mask
):
    images, annotations, raw = coco
    convert(images, tmp_path / "db", "--annotations", annotations, "--instance-masks")
    dataset = LMDBDataset(tmp_path / "db", decode="tensor")
    assert len(dataset) == 3 and dataset.meta["categories"] == raw["categories"]
    assert dataset.fields == ["boxes", "labels", "iscrowd", "area", "image_id", "masks"]

    image, target = dataset[0]
    want = decode_image((images / "a.jpg").read_bytes())
    assert torch.equal(image, torch.from_numpy(want).permute(2, 0, 1))
    assert isinstance(target["boxes"], tv_tensors.BoundingBoxes)
    assert target["boxes"].canvas_size == (48, 64)
    assert target["boxes"].tolist() == [[4, 6, 24, 16], [30.5, 2, 40.5, 42.25]]
    assert target["labels"].tolist() == [18, 90] and target["iscrowd"].tolist() == [0, 0]
    assert target["area"].tolist() == [200, 12.5] and int(target["image_id"]) == 10
    polygon, empty = target["masks"]
    ys, xs = torch.nonzero(polygon, as_tuple=True)
    assert (int(xs.min()), int(ys.min())) >= (4, 6) and (int(xs.max()), int(ys.max())) <= (24, 16)
    assert abs(int(polygon.sum()) - 200) <= 40 and not empty.any()  # no segmentation: empty

    _, unannotated = dataset[1]
    assert unannotated["boxes"].shape == (0, 4) and unannotated["masks"].shape == (0, 40, 40)

    _, crowd = dataset[2]
    assert crowd["iscrowd"].tolist() == [1]
    assert np.array_equal(crowd["masks"][0].numpy(), blob(50, 60))  # RLE: exactly


def test_coco_without_instance_masks_stores_no_masks_and_a_presize_scales_boxes(coco, tmp_path):
    images, annotations, _ = coco
    convert(images, tmp_path / "db", "--annotations", annotations, "--resize", "32")
    image, target = LMDBDataset(tmp_path / "db", decode="tensor")[0]
    assert "masks" not in target and image.shape == (3, 24, 32)
    assert target["boxes"].canvas_size == (24, 32)
    assert target["boxes"].tolist() == [[2, 3, 12, 8], [15.25, 1, 20.25, 21.125]]


def break_json(raw, change):
    raw = json.loads(json.dumps(raw))
    change(raw)
    return raw


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda c: c["images"][1].update(file_name="../b.jpg"),
         r"images\[1\] file_name '../b.jpg' is not a relative path inside the image folder"),
        (lambda c: c["images"][0].update(file_name="/etc/passwd"), "images.0. file_name"),
        (lambda c: c["images"][0].update(file_name="a\0.jpg"), r"images\[0\] file_name 'a\\x00"),
        (lambda c: c["annotations"][2].update(bbox=[1, 2, float("nan"), 3]),
         r"annotations\[2\] \(id 3\) of .*a.jpg: bbox \[1, 2, nan, 3\] is not four finite"),
        (lambda c: c["annotations"][0].update(image_id=99),
         r"annotations\[0\]: image_id 99 is not in 'images'"),
        (lambda c: c["annotations"][0].update(category_id="dog"),
         r"annotations\[0\] \(id 1\) of .*a.jpg: category_id 'dog' is not an integer"),
        (lambda c: c["images"][1].update(id=10), "two images have the same id"),
        (lambda c: c.pop("images"), "not a COCO annotation file"),
        (lambda c: c["images"][0].update(width=65), r"a.jpg: the image is 64x48, .* says 65x48"),
    ],
    ids=["parent", "absolute", "nul", "nan box", "unknown image", "category", "same id",
         "no images", "size"],
)  # fmt: skip
def test_a_bad_annotation_file_is_refused_in_one_line_naming_the_entry(
    coco, tmp_path, capsys, change, message
):
    images, annotations, raw = coco
    annotations.write_text(json.dumps(break_json(raw, change)))
    with pytest.raises(SystemExit) as stopped:
        convert(images, tmp_path / "db", "--annotations", annotations)
    (error,) = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert stopped.value.code == 2 and error.startswith("fastload convert: error: ")
    assert re.search(message, error), error


def test_a_missing_image_and_a_file_that_is_not_json_are_named(coco, tmp_path, capsys):
    images, annotations, _ = coco
    (images / "b.jpg").unlink()
    with pytest.raises(SystemExit):
        convert(images, tmp_path / "db", "--annotations", annotations)
    assert "b.jpg" in capsys.readouterr().err
    convert(images, tmp_path / "db2", "--annotations", annotations, "--skip-bad")
    assert len(LMDBDataset(tmp_path / "db2")) == 2
    annotations.write_text("{not json")
    with pytest.raises(SystemExit):
        convert(images, tmp_path / "db3", "--annotations", annotations)
    assert "instances.json: not a JSON file" in capsys.readouterr().err
    assert not (tmp_path / "db3").exists()


def test_option_combinations_and_a_missing_pycocotools_are_one_line_errors(
    coco, tmp_path, capsys, monkeypatch
):
    images, annotations, _ = coco
    with pytest.raises(SystemExit) as stopped:
        convert(images, tmp_path / "db", "--annotations", annotations, "--masks", images)
    assert stopped.value.code == 2 and "not allowed with argument" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        convert(images, tmp_path / "db", "--instance-masks")
    assert "instance_masks come from annotations" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "pycocotools", None)
    with pytest.raises(SystemExit):
        convert(images, tmp_path / "db", "--annotations", annotations, "--instance-masks")
    assert "pip install '.[coco]'" in capsys.readouterr().err


@pytest.fixture
def segmentation(tmp_path):
    images, masks = tmp_path / "images", tmp_path / "masks"
    write_jpeg(images / "a.jpg", 30, 40, 0)
    write_jpeg(images / "sub" / "b.jpg", 20, 24, 1)
    (masks / "sub").mkdir(parents=True)
    palette = Image.fromarray(np.arange(1200, dtype=np.uint8).reshape(30, 40) % 21, mode="P")
    palette.putpalette([value for i in range(21) for value in (i * 12, 255 - i * 12, 7)])
    palette.save(masks / "a.png")
    Image.fromarray(np.full((20, 24), 255, np.uint8), mode="L").save(masks / "sub" / "b.png")
    return images, masks


def test_a_mask_folder_gives_class_indices_beside_each_image(segmentation, tmp_path):
    images, masks = segmentation
    convert(images, tmp_path / "db", "--masks", masks)
    dataset = LMDBDataset(tmp_path / "db", decode="tensor")
    assert len(dataset) == 2 and dataset.fields == ["mask"]
    image, target = dataset[0]
    assert image.shape == (3, 30, 40) and isinstance(target["mask"], tv_tensors.Mask)
    assert torch.equal(target["mask"], torch.arange(1200, dtype=torch.uint8).reshape(30, 40) % 21)
    assert dataset[1][1]["mask"].unique().tolist() == [255]


def test_mask_folder_problems_are_named(segmentation, tmp_path, capsys):
    images, masks = segmentation
    write_jpeg(images / "c.jpg", 10, 10, 2)
    with pytest.raises(SystemExit):
        convert(images, tmp_path / "db", "--masks", masks)
    assert "masks/c.png: no mask for" in capsys.readouterr().err
    meta = json.loads(json.dumps(_convert_skipping(images, masks, tmp_path / "db2")))
    assert [entry["path"].rsplit("/", 1)[1] for entry in meta["skipped"]] == ["c.jpg"]

    Image.fromarray(np.zeros((10, 10, 3), np.uint8)).save(masks / "c.png")
    with pytest.raises(SystemExit):
        convert(images, tmp_path / "db3", "--masks", masks)
    assert "c.png: a RGB image; masks hold one class index per pixel" in capsys.readouterr().err
    Image.fromarray(np.zeros((11, 10), np.uint8)).save(masks / "c.png")
    with pytest.raises(SystemExit):
        convert(images, tmp_path / "db4", "--masks", masks)
    assert "c.png: the mask is 10x11, its image" in capsys.readouterr().err


def _convert_skipping(images, masks, path):
    from fastload import write_lmdb

    return write_lmdb(images, path, masks=masks, skip_bad=True, num_workers=0, progress=False)


# --- hostile annotations: refused naming the file, the annotation and the image, or read
# back as converted; never a crash, a hang, or a record that cannot be read.

NAN, INF = float("nan"), float("inf")
WHERE = r"instances.json: annotations\[0\] \(id 1\) of .*images/a.jpg: "


def convert_changed(coco, tmp_path, change, *options, name="db"):
    images, annotations, raw = coco
    annotations.write_text(json.dumps(break_json(raw, change)))
    convert(images, tmp_path / name, "--annotations", annotations, *options)


def first(**values):
    return lambda c: c["annotations"][0].update(values)


HOSTILE_VALUES = {
    "area null": (first(area=None), "area None is not a finite number >= 0"),
    "area string": (first(area="5"), "area '5' is not a finite number >= 0"),
    "area negative": (first(area=-1), "area -1 is not a finite number >= 0"),
    "area huge": (first(area=1e39), "area 1e.39 is not a finite number >= 0"),
    "iscrowd null": (first(iscrowd=None), "iscrowd None is not 0 or 1"),
    "iscrowd string": (first(iscrowd="0"), "iscrowd '0' is not 0 or 1"),
    "iscrowd 2": (first(iscrowd=2), "iscrowd 2 is not 0 or 1"),
    "category float": (first(category_id=1.0), r"category_id 1.0 is not an integer"),
    "category huge": (first(category_id=2**70), r"category_id 1180591620717411303424 is not an"),
    "bbox 3 numbers": (first(bbox=[1, 2, 3]), r"bbox \[1, 2, 3\] is not four finite numbers"),
    "bbox bool": (first(bbox=[1, 2, 3, True]), r"bbox \[1, 2, 3, True\] is not four finite"),
    "bbox inf": (first(bbox=[1, 2, INF, 3]), r"bbox \[1, 2, inf, 3\] is not four finite"),
    "bbox negative": (first(bbox=[20, 6, -10, 10]), r"bbox \[20, 6, -10, 10\] has a negative"),
    "bbox outside": (first(bbox=[1e12, 0, 5, 5]), r"bbox .* is outside the 64x48 image"),
    # finite as a Python float, infinite as the float32 a box is stored in
    "bbox 1e39 x": (first(bbox=[1e39, 0, 5, 5]), r"bbox \[1e\+39, 0, 5, 5\] is outside the 64x48"),
    "bbox 1e39 width": (first(bbox=[0, 0, 1e39, 5]), r"bbox \[0, 0, 1e\+39, 5\] is outside"),
    "bbox -1e39": (first(bbox=[-1e39, 0, 1e39, 5]), r"bbox \[-1e\+39, 0, 1e\+39, 5\] is out"),
    "bbox 10**39": (first(bbox=[0, 0, 10**39, 5]), r"bbox \[0, 0, 10{39}, 5\] is outside"),
    "area 10**39": (first(area=10**39), r"area 10{39} is not a finite number >= 0"),
    "iscrowd 300": (first(iscrowd=300), "iscrowd 300 is not 0 or 1"),
    "iscrowd 1.0": (first(iscrowd=1.0), r"iscrowd 1.0 is not 0 or 1"),
    "category 1e30": (first(category_id=1e30), r"category_id 1e\+30 is not an integer"),
    "category 2**63": (first(category_id=2**63), r"category_id 9223372036854775808 is not an"),
    "category -2**63-1": (first(category_id=-(2**63) - 1), r"category_id -9223372036854775809 "),
}

HOSTILE_SEGMENTATIONS = {
    "huge polygon": (
        [[0, 0, 1e12, 0, 1e12, 1e12]],
        r"a polygon reaches outside the 64x48 image \(x 0..1000000000000.0, y 0..1000000000000.0\)",
    ),
    "nan polygon": ([[0, 0, NAN, 0, 10, 10]], r"polygon \[0, 0, nan, 0, 10, 10\] is not a list"),
    "inf polygon": ([[0, 0, 10, -INF, 10, 10]], r"polygon \[0, 0, 10, -inf, 10, 10\] is not a"),
    "odd polygon": ([[0, 0, 10, 0, 10]], r"polygon \[0, 0, 10, 0, 10\] is not a list of at least"),
    "one point": ([[5, 5]], r"polygon \[5, 5\] is not a list of at least two finite"),
    "string": ("abc", "segmentation is a str, not polygons or an RLE"),
    "rle size": ({"size": [480, 640], "counts": [3072]}, r"RLE size \[480, 640\] is not the"),
    "rle no size": ({"counts": [3072]}, r"RLE size None is not the image's \[48, 64\]"),
    "rle long": ({"size": [48, 64], "counts": [0, 5000]}, "RLE counts cover 5000 pixels"),
    "rle negative": (
        {"size": [48, 64], "counts": [10, -5, 3067]},
        "RLE counts hold a negative run",
    ),
    "rle string long": (
        {"size": [48, 64], "counts": rle_string([0, 100000])},
        "RLE counts cover 100000 pixels, the image has 3072",
    ),
    "rle string cut": ({"size": [48, 64], "counts": "0P"}, "RLE counts '0P' are not COCO's"),
    "rle string bytes": ({"size": [48, 64], "counts": "0\u00ff"}, "RLE counts '0\u00ff' are not"),
    "rle string negative": (
        {"size": [48, 64], "counts": rle_string([10, -5, 3067])},
        "RLE counts hold a negative run",
    ),
}


@pytest.mark.parametrize(("change", "message"), HOSTILE_VALUES.values(), ids=HOSTILE_VALUES)
def test_a_value_that_would_not_read_back_is_refused_and_skip_bad_skips_it(
    coco, tmp_path, capsys, change, message
):
    with pytest.raises(SystemExit) as stopped:
        convert_changed(coco, tmp_path, change)
    (error,) = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert stopped.value.code == 2 and error.startswith("fastload convert: error: ")
    assert re.search(WHERE + message, error), error
    assert_skipped(coco, tmp_path, change, message)


def assert_skipped(coco, tmp_path, change, message, *options):
    convert_changed(coco, tmp_path, change, "--skip-bad", *options, name="skipped")
    dataset = LMDBDataset(tmp_path / "skipped")
    (skipped,) = dataset.meta["skipped"]
    assert skipped["path"].endswith("images/a.jpg") and re.search(message, skipped["error"])
    assert len(dataset) == 2 and [int(dataset[i][1]["image_id"]) for i in (0, 1)] == [20, 30]


@pytest.mark.parametrize(
    ("segmentation", "message"), HOSTILE_SEGMENTATIONS.values(), ids=HOSTILE_SEGMENTATIONS
)
def test_a_segmentation_that_would_crash_pycocotools_is_refused_and_skippable(
    coco, tmp_path, capsys, coco_mask, segmentation, message
):
    change = first(segmentation=segmentation)
    with pytest.raises(SystemExit) as stopped:
        convert_changed(coco, tmp_path, change, "--instance-masks")
    (error,) = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert stopped.value.code == 2 and re.search(WHERE + message, error), error
    assert_skipped(coco, tmp_path, change, message, "--instance-masks")


@pytest.mark.parametrize(
    ("error", "shown"),
    [
        (Exception("input type is not supported."), "Exception: input type is not supported."),
        (OverflowError("value too large to convert to uint32_t"), "OverflowError: value too"),
    ],
    ids=["bare Exception", "OverflowError"],
)
def test_a_segmentation_pycocotools_refuses_is_a_named_skippable_error(
    coco, tmp_path, capsys, monkeypatch, error, shown
):
    """What the checks let through and pycocotools still refuses (its bare ``Exception``
    for an input type, numpy's OverflowError for a count past uint32): never a traceback."""
    coco_mask = pytest.importorskip("pycocotools.mask")
    decode = coco_mask.decode

    def refuse_the_first_annotation(rle):
        if list(rle["size"]) != [48, 64]:  # a.jpg's only segmentation: annotation 1's
            return decode(rle)
        raise error

    monkeypatch.setattr(coco_mask, "decode", refuse_the_first_annotation)
    message = "pycocotools cannot rasterise the segmentation " + re.escape(f"({shown}")
    with pytest.raises(SystemExit) as stopped:
        convert_changed(coco, tmp_path, first(), "--instance-masks")
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert stopped.value.code == 2 and re.search(WHERE + message, line), line
    assert_skipped(coco, tmp_path, first(), message, "--instance-masks")


@pytest.mark.slow
def test_a_huge_polygon_with_workers_is_named_not_a_hang(coco, tmp_path, capsys, coco_mask):
    images, annotations, raw = coco
    annotations.write_text(json.dumps(break_json(raw, first(segmentation=[[0, 0, 1e12, 0, 1, 1]]))))
    with pytest.raises(SystemExit) as stopped:
        main(["convert", str(images), str(tmp_path / "db"), "--annotations", str(annotations),
              "--instance-masks", "--workers", "2"])  # fmt: skip
    assert stopped.value.code == 2
    assert re.search(WHERE + "a polygon reaches outside", capsys.readouterr().err)


def test_what_coco_really_holds_converts_and_reads_back(coco, tmp_path, coco_mask):
    """A little outside the image, two-point polygons, no area or iscrowd, a zero-width box,
    a polygon's first point repeated: accepted, and read back as stored."""
    change = first(
        bbox=[-1, -0.5, 65.5, 49], segmentation=[[-0.5, -1, 64.7, 0, 65, 48.9], [3, 3, 9, 9]]
    )

    def edit(c):
        change(c)
        del c["annotations"][0]["area"], c["annotations"][0]["iscrowd"]
        c["annotations"][2].update(bbox=[30, 2, 0, 0], segmentation=[[1, 1, 20, 1]], iscrowd=True)

    convert_changed(coco, tmp_path, edit, "--instance-masks")
    _, target = LMDBDataset(tmp_path / "db", decode="tensor")[0]
    assert target["boxes"].tolist() == [[-1, -0.5, 64.5, 48.5], [30, 2, 30, 2]]
    assert target["area"].tolist() == [0, 12.5] and target["iscrowd"].tolist() == [0, 1]
    big, line = target["masks"]
    assert int(big.sum()) > 1000 and int(line.sum()) < 40


def test_the_rle_helpers_agree_with_pycocotools(coco_mask):
    from fastload.records.coco import _rle_string_counts

    generator = np.random.default_rng(0)
    for mask in [blob(50, 60), np.ones((3, 4), np.uint8), generator.integers(0, 2, (30, 20))]:
        mask = np.asfortranarray(mask.astype(np.uint8))
        counts = coco_mask.encode(mask)["counts"].decode()
        assert rle_string(rle_runs(mask)) == counts
        assert _rle_string_counts(counts, what="test") == rle_runs(mask)


def png_claiming(width, height):
    """A PNG whose header claims ``width`` x ``height`` 8-bit grey pixels (and holds none)."""
    import struct
    import zlib

    def chunk(kind, data):
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IEND", b"")


def test_a_mask_claiming_ten_billion_pixels_is_named_and_skippable(segmentation, tmp_path, capsys):
    images, masks = segmentation
    (masks / "a.png").write_bytes(png_claiming(100_000, 100_000))
    with pytest.raises(SystemExit) as stopped:
        convert(images, tmp_path / "db", "--masks", masks)
    (error,) = capsys.readouterr().err.strip().splitlines()[-1:]
    assert stopped.value.code == 2 and "Traceback" not in error
    assert re.search(
        r"^fastload convert: error: .*masks/a.png: not a mask for .*images/a.jpg "
        r"\(Image size \(10000000000 pixels\) exceeds limit",
        error,
    ), error
    meta = _convert_skipping(images, masks, tmp_path / "skipped")
    assert meta["count"] == 1 and [Path(e["path"]).name for e in meta["skipped"]] == ["a.jpg"]


def test_a_mask_of_the_wrong_size_is_refused_before_its_pixels_are_read(
    segmentation, tmp_path, capsys
):
    images, masks = segmentation
    (masks / "a.png").write_bytes(png_claiming(41, 30))  # no pixel data: only the header read
    with pytest.raises(SystemExit):
        convert(images, tmp_path / "db", "--masks", masks)
    assert "a.png: the mask is 41x30, its image" in capsys.readouterr().err
