"""Masks, boxes and keypoints beside the image batch: moved with the same per-sample
parameters as the images, equal to torchvision v2's kernels per sample, aligned with the
image pixel for pixel where pixels are copied, and refused where a module cannot move them."""

from __future__ import annotations

import pytest
import torch
import torchvision.transforms.v2.functional as TF
from hypothesis import given, settings
from hypothesis import strategies as st
from torchvision import tv_tensors

from common_utils import cpu_and_cuda
from fastload import gpu
from gpu_cases import images

N, H, W = 5, 40, 56
MOVERS = {
    "RandomHorizontalFlip": lambda: gpu.RandomHorizontalFlip(p=0.5),
    "RandomVerticalFlip": lambda: gpu.RandomVerticalFlip(p=0.5),
    "RandomCrop": lambda: gpu.RandomCrop((24, 30), padding=4),
    "CenterCrop": lambda: gpu.CenterCrop((24, 30)),
    "Resize": lambda: gpu.Resize(20),
    "RandomResizedCrop": lambda: gpu.RandomResizedCrop((24, 30)),
    "RandomAffine": lambda: gpu.RandomAffine(30, (0.1, 0.1), (0.8, 1.2), 10),
    "RandomRotation": lambda: gpu.RandomRotation(40),
    "RandomPerspective": lambda: gpu.RandomPerspective(0.4, p=0.5),
    "ElasticTransform": lambda: gpu.ElasticTransform(30.0, 4.0),
}


def fixed_elastic(target, displacement):
    """torchvision's elastic as fixed by pytorch/vision#9394, on every version: box corners
    and keypoints looked up at a pixel of the canvas (older versions index past the field
    for a corner at x = width; `test_elastic_moves_points_on_the_canvas_edge` shows that
    clamping first is what a fixed torchvision does)."""
    if isinstance(target, tv_tensors.BoundingBoxes):
        height, width = target.canvas_size
        xyxy = TF.convert_bounding_box_format(target, new_format="XYXY")
        x = xyxy[:, 0::2].clamp(0, width - 1)
        y = xyxy[:, 1::2].clamp(0, height - 1)
        inside = tv_tensors.wrap(torch.stack([x[:, 0], y[:, 0], x[:, 1], y[:, 1]], 1), like=xyxy)
        moved = TF.elastic(inside, displacement)
        return TF.convert_bounding_box_format(moved, new_format=target.format)
    if isinstance(target, getattr(tv_tensors, "KeyPoints", ())):
        height, width = target.canvas_size
        x, y = target[:, 0].clamp(0, width - 1), target[:, 1].clamp(0, height - 1)
        return TF.elastic(tv_tensors.wrap(torch.stack([x, y], 1), like=target), displacement)
    return TF.elastic(target, displacement)


def reference(name: str, module, target, params: dict, i: int):
    """torchvision's kernel for sample ``i``'s parameters."""
    if name.endswith("Flip"):
        flip = TF.horizontal_flip if "Horizontal" in name else TF.vertical_flip
        return flip(target) if params["apply"][i] else target
    if name == "RandomCrop":
        padded = TF.pad(target, [4, 4, 4, 4])
        return TF.crop(padded, int(params["top"][i]), int(params["left"][i]), 24, 30)
    if name == "CenterCrop":
        return TF.center_crop(target, [24, 30])
    if name == "Resize":
        return TF.resize(target, [20, 28])
    if name == "RandomAffine":
        return TF.affine(
            target, angle=float(params["angle"][i]), translate=params["translate"][i].tolist(),
            scale=float(params["scale"][i]), shear=params["shear"][i].tolist(),
        )  # fmt: skip
    if name == "RandomRotation":
        return TF.rotate(target, float(params["angle"][i]))
    if name == "RandomPerspective":
        corners = [[0, 0], [W - 1, 0], [W - 1, H - 1], [0, H - 1]]
        endpoints = params["endpoints"][i].tolist()
        return TF.perspective(target, corners, endpoints) if params["apply"][i] else target
    if name == "ElasticTransform":
        return fixed_elastic(target, params["displacement"][i : i + 1])
    box = (int(params[k][i]) for k in ("top", "left", "height", "width"))
    return TF.resized_crop(target, *box, [24, 30])


def boxes_per_image(seed: int = 0, fmt: str = "XYXY") -> list[tv_tensors.BoundingBoxes]:
    generator = torch.Generator().manual_seed(seed)
    out = []
    for i in range(N):
        count = i % 3 + 1  # a different count per image
        corner = torch.rand(count, 2, generator=generator) * torch.tensor([W - 10, H - 10])
        size = 2 + torch.rand(count, 2, generator=generator) * 20
        xyxy = torch.cat([corner, (corner + size).minimum(torch.tensor([W, H]))], dim=1)
        boxes = tv_tensors.BoundingBoxes(xyxy, format="XYXY", canvas_size=(H, W))
        out.append(
            TF.convert_bounding_box_format(boxes, new_format=fmt) if fmt != "XYXY" else boxes
        )
    return out


WARPS = ("RandomAffine", "RandomRotation", "RandomPerspective", "ElasticTransform")


def assert_same_mask(ours, want, name: str) -> None:
    """Equal on the CPU; on CUDA a warp's batched grid may round a sample landing on a
    pixel edge to the other neighbour: under 1 % of pixels."""
    if ours.device.type == "cpu" or name not in WARPS:
        assert torch.equal(ours, want)
    else:
        assert (ours != want).double().mean() < 0.01


@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("fmt", ["XYXY", "XYWH", "CXCYWH"])
@pytest.mark.parametrize("name", MOVERS)
def test_images_masks_and_boxes_move_together_as_torchvision_moves_them(name, fmt, device):
    module = MOVERS[name]()
    batch = images(n=N, device=device)
    masks = tv_tensors.Mask(
        torch.randint(0, 4, (N, H, W), generator=torch.Generator().manual_seed(1))
    ).to(device)
    stacked = tv_tensors.Mask(torch.stack([masks, masks.flip(-1)], dim=1))  # (N, K, H, W)
    boxes = [b.to(device) for b in boxes_per_image(fmt=fmt)]
    labels = [torch.arange(len(b), device=device) for b in boxes]
    targets = [{"boxes": b, "labels": y} for b, y in zip(boxes, labels, strict=True)]
    params = module.sample_params(batch.shape, batch.device)

    out_images, out_masks, out_stacked, out_targets = module(
        batch, masks, stacked, targets, params=params
    )
    assert torch.equal(out_images, module(batch, params=params))
    assert type(out_masks) is tv_tensors.Mask and type(out_targets) is list
    for i in range(N):
        want_mask = reference(name, module, tv_tensors.Mask(masks[i]), params, i)
        assert_same_mask(out_masks[i], want_mask, name)
        want_stacked = reference(name, module, tv_tensors.Mask(stacked[i]), params, i)
        assert_same_mask(out_stacked[i], want_stacked, name)
        moved = out_targets[i]["boxes"]
        want = reference(name, module, boxes[i], params, i)
        assert isinstance(moved, tv_tensors.BoundingBoxes) and moved.format == want.format
        assert moved.canvas_size == want.canvas_size == tuple(out_images.shape[-2:])
        torch.testing.assert_close(moved.as_subclass(torch.Tensor), want.as_subclass(torch.Tensor))
        assert out_targets[i]["labels"] is labels[i]  # other leaves pass through as they are


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), name=st.sampled_from(["RandomHorizontalFlip",
       "RandomVerticalFlip", "RandomCrop", "CenterCrop"]))  # fmt: skip
def test_painted_regions_stay_under_their_boxes_and_masks(seed, name):
    """Paint each box's region in a colour of its own, in the image and in a mask: where
    pixels are copied (flips, crops), the mask stays equal to the painted image pixel for
    pixel, and each colour's extent is its transformed box."""
    torch.manual_seed(seed)
    canvas = torch.zeros(N, 3, H, W, dtype=torch.uint8)
    painted = torch.zeros(N, H, W, dtype=torch.int64)
    boxes = []
    for i in range(N):
        rows = []
        for colour, left in enumerate((2, 20, 38), start=1):  # side by side, never touching
            top, width, height = int(torch.randint(0, 20, ())), 14, int(torch.randint(4, 18, ()))
            canvas[i, 0, top : top + height, left : left + width] = colour * 60
            painted[i, top : top + height, left : left + width] = colour
            rows.append([left, top, left + width, top + height])
        boxes.append(tv_tensors.BoundingBoxes(rows, format="XYXY", canvas_size=(H, W)))
    out, masks, moved = MOVERS[name]()(canvas, tv_tensors.Mask(painted), boxes)
    assert torch.equal(out[:, 0].long(), masks.as_subclass(torch.Tensor) * 60)
    for i in range(N):
        for colour in (1, 2, 3):
            ys, xs = torch.nonzero(masks[i] == colour, as_tuple=True)
            box = moved[i][colour - 1].tolist()
            if len(xs) == 0:  # cropped away: its box is empty once clipped
                assert box[2] - box[0] <= 0 or box[3] - box[1] <= 0
                continue
            assert [int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1] == box


@pytest.mark.skipif(
    not hasattr(tv_tensors, "KeyPoints"), reason="this torchvision has no KeyPoints"
)
def test_keypoints_move_with_their_image():
    batch = images(n=N)
    points = [
        tv_tensors.KeyPoints([[5.0, 7.0], [50.0, 30.0]], canvas_size=(H, W)) for _ in range(N)
    ]
    module = gpu.RandomHorizontalFlip(p=1.0)
    _, moved = module(batch, points)
    for original, flipped in zip(points, moved, strict=True):
        torch.testing.assert_close(
            flipped.as_subclass(torch.Tensor),
            TF.horizontal_flip(original).as_subclass(torch.Tensor),
        )


@pytest.mark.skipif(
    not hasattr(tv_tensors, "KeyPoints"), reason="this torchvision has no KeyPoints"
)
@pytest.mark.parametrize("device", cpu_and_cuda())
@pytest.mark.parametrize("fmt", ["XYXY", "XYWH", "CXCYWH"])
def test_elastic_moves_points_on_the_canvas_edge(fmt, device):
    """Corners at x = width or y = height, or off the canvas, are common (a box to the
    image's edge): torchvision before #9394 looked them up past its field (a device-side
    assert on CUDA, which breaks the process's CUDA context); they move as a fixed
    torchvision moves them, and on this torchvision, if fixed, as it does unaided."""
    corners = [[0.0, 0.0, W, H], [-3.0, 5.0, W + 2.0, H], [10.0, 10.0, 20.0, 20.0]]
    boxes = TF.convert_bounding_box_format(
        tv_tensors.BoundingBoxes(corners, format="XYXY", canvas_size=(H, W)), new_format=fmt
    ).to(device)
    points = tv_tensors.KeyPoints([[W, H], [0.0, 0.0], [-1.0, H + 3.0]], canvas_size=(H, W))
    points = points.to(device)
    module = gpu.ElasticTransform(30.0, 4.0)
    batch = images(n=1, device=device)
    params = module.sample_params(batch.shape, batch.device)
    _, (moved_boxes,) = module(batch, [boxes], params=params)
    _, (moved_points,) = module(batch, [points], params=params)
    displacement = params["displacement"]
    for moved, original in ((moved_boxes, boxes), (moved_points, points)):
        want = fixed_elastic(original, displacement)
        assert type(moved) is type(original) and moved.canvas_size == (H, W)
        torch.testing.assert_close(moved.as_subclass(torch.Tensor), want.as_subclass(torch.Tensor))
        try:
            unaided = TF.elastic(original.to("cpu"), displacement.cpu())
        except IndexError:  # a torchvision without the fix
            continue
        torch.testing.assert_close(
            moved.as_subclass(torch.Tensor).cpu(), unaided.as_subclass(torch.Tensor)
        )
    assert moved_boxes.format.name == fmt


@pytest.mark.parametrize(
    "module",
    [gpu.ColorJitter(0.4, 0.4), gpu.RandomGrayscale(p=1.0), gpu.GaussianBlur(5),
     gpu.RandomInvert(p=1.0), gpu.RandomErasing(p=1.0), gpu.ToDtype(torch.float32, scale=True),
     gpu.GaussianNoise()],
    ids=lambda m: type(m).__name__,
)  # fmt: skip
def test_colour_and_pixel_operations_pass_targets_through(module):
    batch = images(n=N)
    masks, boxes = tv_tensors.Mask(torch.zeros(N, H, W)), boxes_per_image()
    out, same_masks, same_boxes = module(batch, masks, boxes)
    assert out.shape[0] == N and same_masks is masks
    assert all(a is b for a, b in zip(same_boxes, boxes, strict=True))


@pytest.mark.parametrize(
    "module",
    [gpu.TrivialAugmentWide(), gpu.RandAugment(), gpu.AutoAugment(), gpu.AugMix()],
    ids=lambda m: type(m).__name__,
)  # fmt: skip
def test_geometry_that_cannot_move_targets_yet_refuses_them(module):
    with pytest.raises(TypeError, match=rf"{type(module).__name__} cannot move BoundingBoxes"):
        module(images(n=N), boxes_per_image())


def test_one_box_set_per_image_in_batch_order():
    with pytest.raises(
        ValueError, match=r"BoundingBoxes and KeyPoints come one per image.*got 2 for 5"
    ):
        gpu.RandomHorizontalFlip()(images(n=N), boxes_per_image()[:2])


def test_a_mask_of_the_wrong_shape_is_refused():
    with pytest.raises(ValueError, match=r"a Mask beside 5 images of \(40, 56\) must be"):
        gpu.RandomHorizontalFlip()(images(n=N), tv_tensors.Mask(torch.zeros(N, H, W - 1)))


def test_without_an_image_batch_the_call_says_so():
    with pytest.raises(TypeError, match=r"found no image batch among its inputs"):
        gpu.RandomHorizontalFlip()(boxes_per_image())


def test_sanitize_removes_degenerate_boxes_with_their_labels_and_masks_per_image():
    batch = images(n=2)
    targets = [
        {
            "boxes": tv_tensors.BoundingBoxes(
                [[0, 0, 1, 1], [2, 2, 12, 12], [5, 5, 5, 9]], format="XYXY", canvas_size=(H, W)
            ),
            "labels": torch.tensor([1, 2, 3]),
            "masks": tv_tensors.Mask(torch.zeros(3, H, W)),
        },
        {
            "boxes": tv_tensors.BoundingBoxes([[0, 0, 30, 30]], format="XYXY", canvas_size=(H, W)),
            "labels": torch.tensor([7]),
            "masks": tv_tensors.Mask(torch.zeros(1, H, W)),
        },
    ]
    same, cleaned = gpu.SanitizeBoundingBoxes(min_size=2)(batch, targets)
    assert same is batch
    assert cleaned[0]["labels"].tolist() == [2] and cleaned[0]["boxes"].tolist() == [[2, 2, 12, 12]]
    assert cleaned[0]["masks"].shape == (1, H, W) and cleaned[1]["labels"].tolist() == [7]
    # a centre crop of 10x10 (rows 15-25, columns 23-33) leaves the first image's boxes
    # outside it: they go; the second's overlaps it and stays; per-image masks are cropped
    cropped_images, cropped = gpu.CenterCrop(10)(batch, targets)
    assert cropped[0]["masks"].shape == (3, 10, 10) and cropped[1]["masks"].shape == (1, 10, 10)
    _, sane = gpu.SanitizeBoundingBoxes()(cropped_images, cropped)
    assert sane[0]["labels"].tolist() == [] and sane[1]["labels"].tolist() == [7]
    assert sane[1]["boxes"].tolist() == [[0, 0, 7, 10]]
    with pytest.raises(ValueError, match=r"1 targets for 2 images"):
        gpu.SanitizeBoundingBoxes()(batch, targets[:1])
    with pytest.raises(TypeError, match=r"targets a list holding each image's target, got dict"):
        gpu.SanitizeBoundingBoxes()(batch, targets[0])


@pytest.mark.parametrize("name", ["RandomResizedCrop", "RandomAffine", "RandomHorizontalFlip"])
def test_per_image_instance_masks_move_with_their_own_image(name):
    """An image's masks are those in its target, beside its boxes (torchvision's layout)."""
    module = MOVERS[name]()
    batch = images(n=N)
    generator = torch.Generator().manual_seed(2)
    masks = [
        tv_tensors.Mask(torch.randint(0, 2, (i + 1, H, W), generator=generator)) for i in range(N)
    ]
    boxes = boxes_per_image()
    targets = [{"boxes": b, "masks": m} for b, m in zip(boxes, masks, strict=True)]
    params = module.sample_params(batch.shape, batch.device)
    _, moved = module(batch, targets, params=params)
    for i in range(N):
        assert torch.equal(moved[i]["masks"], reference(name, module, masks[i], params, i))


@pytest.mark.parametrize("name", MOVERS)
def test_box_parameters_come_to_the_host_once_per_batch(name, monkeypatch):
    import fastload.gpu.base as base

    copies = []

    def counted(values):
        copies.append(sorted(values))
        return to_host(values)

    to_host = base._to_host
    monkeypatch.setattr(base, "_to_host", counted)
    module = MOVERS[name]()
    module(images(n=N), boxes_per_image())
    assert len(copies) <= 1  # CenterCrop and Resize need none
    if copies and name == "ElasticTransform":
        assert "displacement" not in copies[0]  # a whole field stays a tensor


# --- each image's own masks follow that image, found by the target they sit in ------------------


def _boxes(height: int, width: int) -> tv_tensors.BoundingBoxes:
    return tv_tensors.BoundingBoxes([[1, 1, 4, 4]], format="XYXY", canvas_size=(height, width))


def _masks(*shape: int, seed: int) -> tv_tensors.Mask:
    generator = torch.Generator().manual_seed(seed)
    return tv_tensors.Mask(torch.randint(0, 2, shape, dtype=torch.uint8, generator=generator))


def _flip_first_only(images, targets):
    flip = gpu.RandomHorizontalFlip()
    return flip(images, targets, params={"apply": torch.tensor([True, False])})


def test_two_masks_in_one_target_both_follow_its_image():
    images = torch.zeros(2, 3, 6, 8, dtype=torch.uint8)
    targets = [
        {"boxes": _boxes(6, 8), "masks": _masks(2, 6, 8, seed=0), "semantic": _masks(6, 8, seed=1)},
        {"boxes": _boxes(6, 8), "masks": _masks(1, 6, 8, seed=2)},
    ]
    _, out = _flip_first_only(images, targets)
    assert torch.equal(out[0]["masks"], targets[0]["masks"].flip(-1))
    assert torch.equal(out[0]["semantic"], targets[0]["semantic"].flip(-1))
    assert torch.equal(out[1]["masks"], targets[1]["masks"])  # image 1 was not flipped


def test_a_target_without_masks_leaves_the_others_with_their_own_images():
    images = torch.zeros(2, 3, 6, 8, dtype=torch.uint8)
    targets = [{"boxes": _boxes(6, 8)}, {"boxes": _boxes(6, 8), "masks": _masks(1, 6, 8, seed=3)}]
    _, out = _flip_first_only(images, targets)
    assert torch.equal(out[1]["masks"], targets[1]["masks"])  # image 1's, not flipped


def test_masks_in_per_image_targets_without_boxes_follow_their_place_in_the_list():
    # a segmentation LMDB's targets, collated: one {"mask": (H, W)} per image; K == N once
    # counted the masks' own K into the pairing
    images = torch.zeros(2, 3, 6, 8, dtype=torch.uint8)
    for targets in (
        [{"masks": _masks(2, 6, 8, seed=4)}, {"masks": _masks(2, 6, 8, seed=5)}],
        ({"mask": _masks(6, 8, seed=4)}, {"mask": _masks(6, 8, seed=5)}),
    ):
        _, out = _flip_first_only(images, targets)
        (key,) = targets[0]
        assert torch.equal(out[0][key], targets[0][key].flip(-1))
        assert torch.equal(out[1][key], targets[1][key])  # image 1 was not flipped


def test_a_list_of_one_mask_per_image_pairs_by_place():
    images = torch.zeros(2, 3, 6, 8, dtype=torch.uint8)
    masks = [_masks(6, 8, seed=8), _masks(3, 6, 8, seed=9)]
    _, out = _flip_first_only(images, masks)
    assert torch.equal(out[0], masks[0].flip(-1)) and torch.equal(out[1], masks[1])


def test_masks_in_a_list_of_targets_of_another_length_are_refused_by_name():
    images = torch.zeros(2, 3, 6, 8, dtype=torch.uint8)
    targets = [{"masks": _masks(2, 6, 8, seed=4)}] * 3
    with pytest.raises(
        ValueError,
        match=r"cannot tell which image the Mask at \(1, 0, 'masks'\) belongs to: it sits in "
        r"a list of 3 targets for 2 images",
    ):
        _flip_first_only(images, targets)


def test_a_batch_mask_beside_the_targets_in_a_tuple_still_holds_the_batch():
    images = torch.zeros(2, 3, 6, 8, dtype=torch.uint8)
    valid = _masks(2, 6, 8, seed=10)
    targets = [{"masks": _masks(1, 6, 8, seed=11)} for _ in range(2)]
    flip = gpu.RandomHorizontalFlip()
    _, (out_valid, out_targets) = flip(
        (images, (valid, targets)), params={"apply": torch.tensor([True, False])}
    )
    assert torch.equal(out_valid[0], valid[0].flip(-1)) and torch.equal(out_valid[1], valid[1])
    assert torch.equal(out_targets[1]["masks"], targets[1]["masks"])


def test_a_batch_mask_at_the_top_of_a_padded_batch_still_holds_the_batch():
    images = torch.zeros(2, 3, 6, 8, dtype=torch.uint8)
    valid = _masks(2, 6, 8, seed=6)  # padded_collate's (N, H, W) mask of each image's pixels
    targets = [{"boxes": _boxes(6, 8), "masks": _masks(1, 6, 8, seed=7)} for _ in range(2)]
    flip = gpu.RandomHorizontalFlip()
    out = flip([images, valid, targets], params={"apply": torch.tensor([True, False])})
    assert torch.equal(out[1][0], valid[0].flip(-1)) and torch.equal(out[1][1], valid[1])
    assert torch.equal(out[2][1]["masks"], targets[1]["masks"])
