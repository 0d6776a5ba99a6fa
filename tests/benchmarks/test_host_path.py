"""benchmarks/host_path.py: the stand-ins give GPUDecoder's own batch (the fused kernel's
launch made, its host side included), the patches are undone after a run, and a smoke run
reports every variant against its backend's "before"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from fastload.collate import encoded_collate
from fastload.decode import gpu as gpu_module
from fastload.decode.crop import crop_resize_finish
from tests.common_utils import run_script

pytest.importorskip("triton", reason="needs Triton (with torch's Linux wheels)")
pytest.importorskip("nvidia.nvimgcodec", reason="needs nvImageCodec (pip install '.[nvimgcodec]')")

from benchmarks import host_path
from fastload.decode import resample_triton

SCRIPT = Path(host_path.__file__)


@pytest.fixture(scope="module")
def photos() -> list[bytes]:
    return host_path.photos(6)


@pytest.mark.parametrize("backend", ["nvjpeg", "nvimgcodec"])
def test_the_stood_in_decoder_launches_the_kernel_with_every_image_in_its_table(backend, photos):
    outputs = host_path.Outputs(photos)
    launches = []

    class Recorder:
        def __getitem__(self, grid):
            return lambda *args, **kwargs: launches.append((grid, args))

    packed, _ = encoded_collate([(torch.frombuffer(bytearray(e), dtype=torch.uint8), 0)
                                 for e in photos])  # fmt: skip
    with host_path.kernel_launch_stood_in():  # which puts the kernel back on leaving
        resample_triton.crop_resize_finish_kernel = Recorder()
        made = host_path.decoder(backend, outputs, 32)
        made.scale, made.generator = (0.08, 0.2), torch.Generator().manual_seed(0)
        batch = made(packed)
    assert batch.shape == (6, 3, 32, 32) and batch.dtype == torch.uint8
    [(grid, args)] = launches
    assert grid == (6, 8)  # 6 images, 32 * 32 pixels in blocks of 128
    table = args[0]
    if backend == "nvjpeg":  # the stand-in's CHW images, read where they lie, whole
        assert table[:, 0].tolist() == [image.data_ptr() for image in outputs.chw]
        assert table[:, 1:3].tolist() == [[375, 500]] * 6
    else:  # nvImageCodec's HWC regions: 3 values a pixel, 1 a channel, rows of the whole
        assert table[:, 3].tolist() == [1] * 6 and table[:, 5].tolist() == [3] * 6
        assert table[:, 4].tolist() == [500 * 3] * 6
        heights, widths = table[:, 1], table[:, 2]
        assert bool((heights <= 375).all() and (widths <= 500).all())
        assert bool((heights * widths < 375 * 500).all())  # crops of 8 to 20 % of each


def test_a_smoke_run_reports_every_variant_and_leaves_nothing_patched(tmp_path):
    threads = torch.get_num_threads()
    run_script(SCRIPT, "--batch", "8", "--rounds", "1", "--repeats", "1", "--out", str(tmp_path))
    assert gpu_module.crop_resize_finish is crop_resize_finish
    assert resample_triton.crop_resize_finish_kernel.__class__.__name__ == "JITFunction"
    assert torch.get_num_threads() == threads
    result = json.loads((tmp_path / "host_path.json").read_text())
    rows = {row["name"]: row for row in result["rows"]}
    assert list(rows) == [
        "collate: read the headers (in the worker)",
        "nvjpeg, before", "nvjpeg, after", "nvjpeg, after, list in",
        "nvimgcodec, before", "nvimgcodec, after", "nvimgcodec, after, list in",
    ]  # fmt: skip
    assert rows["nvjpeg, after"]["versus"] == "nvjpeg, before"
    assert rows["nvimgcodec, after, list in"]["versus"] == "nvimgcodec, before"
    assert rows["collate: read the headers (in the worker)"]["within 1 ms"] == "-"
    for name, row in rows.items():
        assert row["items"] == 8 and row["median_s"] > 0, name
        if not name.startswith("collate"):
            ms = float(row["CPU ms/batch"])
            assert row["within 1 ms"] == ("yes" if ms * 256 / 8 <= 1.0 else "no"), name
