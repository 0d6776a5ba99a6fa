"""The JPEG header reader: PIL's sizes, components, coding and EXIF orientation on real
files, None (never an exception) on hostile bytes, and a bounded look at the tail."""

from __future__ import annotations

import io
import struct

import cv2
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

from fastload.collate import EncodedBatch
from fastload.decode.opencv import decode_image, displayed_size
from fastload.jpeg import (
    END_WINDOW,
    MAX_SEGMENTS,
    JpegHeader,
    header_table,
    jpeg_header,
    read_jpeg_header,
)
from fastload.testing.synthetic import photo_like_image

ORIENTATION = 0x0112


def pil_jpeg(height: int, width: int, *, mode: str = "RGB", orientation: int | None = None,
             endian: str = "<", seed: int = 0, **options) -> bytes:  # fmt: skip
    rgb = photo_like_image(np.random.default_rng(seed), height, width)
    image = Image.fromarray(rgb).convert(mode)
    if orientation is not None:
        exif = Image.Exif()
        exif.endian = endian
        exif[0x010F] = "fastload"  # Make: the orientation tag is then not the first entry
        exif[ORIENTATION] = orientation
        options["exif"] = exif.tobytes()
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=90, **options)
    return buffer.getvalue()


def opencv_jpeg(height: int, width: int, *, gray: bool = False, progressive: bool = False) -> bytes:
    bgr = photo_like_image(np.random.default_rng(1), height, width)
    image = cv2.cvtColor(bgr, cv2.COLOR_BGR2GRAY) if gray else bgr
    ok, data = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_PROGRESSIVE, int(progressive)])
    assert ok
    return data.tobytes()


def pil_says(data: bytes) -> tuple[int, int, int, bool, int]:
    with Image.open(io.BytesIO(data)) as image:
        components = {"L": 1, "RGB": 3, "CMYK": 4}[image.mode]
        progressive = bool(image.info.get("progressive"))
        return (
            image.height,
            image.width,
            components,
            progressive,
            image.getexif().get(ORIENTATION, 1),
        )


def ours(header: JpegHeader | None) -> tuple[int, int, int, bool, int]:
    assert header is not None
    return header.height, header.width, header.components, header.progressive, header.orientation


@pytest.mark.parametrize("orientation", range(1, 9))
@pytest.mark.parametrize("endian", ["<", ">"], ids=["II", "MM"])
def test_exif_orientation_in_either_byte_order_is_pils(orientation, endian):
    data = pil_jpeg(30, 50, orientation=orientation, endian=endian)
    header = jpeg_header(data)
    assert ours(header) == pil_says(data) == (30, 50, 3, False, orientation)
    # and the displayed size is what OpenCV's decode returns
    assert (
        header.displayed
        == decode_image(data).shape[:2]
        == displayed_size(np.frombuffer(data, np.uint8))
    )


@given(
    height=st.integers(8, 80),  # photo_like_image's smallest
    width=st.integers(8, 80),
    mode=st.sampled_from(["RGB", "L", "CMYK"]),
    progressive=st.booleans(),
    orientation=st.one_of(st.none(), st.integers(1, 8)),
)
def test_pils_jpegs_read_as_pil_reads_them(height, width, mode, progressive, orientation):
    data = pil_jpeg(height, width, mode=mode, orientation=orientation, progressive=progressive)
    header = jpeg_header(data)
    assert ours(header) == pil_says(data)
    assert header.precision == 8 and header.ends
    assert header.frame == (0xC2 if progressive else 0xC0)


@pytest.mark.parametrize("gray", [False, True])
@pytest.mark.parametrize("progressive", [False, True])
def test_opencvs_jpegs_read_as_pil_reads_them(gray, progressive):
    data = opencv_jpeg(45, 70, gray=gray, progressive=progressive)
    assert ours(jpeg_header(data)) == pil_says(data) == (45, 70, 1 if gray else 3, progressive, 1)


def test_every_form_of_the_bytes_reads_alike_without_a_copy_of_the_file():
    data = pil_jpeg(20, 30, orientation=6)
    array = np.frombuffer(data, np.uint8)
    forms = [data, bytearray(data), memoryview(data), array, torch.from_numpy(array.copy())]
    assert len({jpeg_header(form) for form in forms}) == 1
    # one image of several in a shared buffer
    shared = b"junk" + data + b"more"
    assert read_jpeg_header(shared, 4, 4 + len(data)) == jpeg_header(data)


def test_the_end_marker_is_looked_for_in_the_tail_only():
    data = opencv_jpeg(40, 40)
    assert jpeg_header(data).ends
    assert jpeg_header(data + bytes(10)).ends  # padding after the end marker
    assert not jpeg_header(data + bytes(END_WINDOW)).ends  # too far from the end
    cut = data[: len(data) * 2 // 3]  # cut inside the scan: a header, no end
    assert jpeg_header(cut) is not None and not jpeg_header(cut).ends


def segment(marker: int, payload: bytes) -> bytes:
    return bytes([0xFF, marker]) + struct.pack(">H", len(payload) + 2) + payload


FRAME = segment(0xC0, struct.pack(">BHHB", 8, 10, 20, 1) + b"\x01\x11\x00")
SCAN = segment(0xDA, b"\x01\x01\x00\x00\x3f\x00") + b"\x00" * 8 + b"\xff\xd9"


@pytest.mark.parametrize(
    "data",
    [
        b"\xff\xd8" + SCAN,  # a scan with no frame before it
        b"\xff\xd8" + FRAME + FRAME + SCAN,  # two frames
        b"\xff\xd8" + FRAME,  # no scan
        b"\xff\xd8" + FRAME[:-2],  # the frame cut short
        b"\xff\xd8"
        + segment(0xC0, struct.pack(">BHHB", 8, 10, 20, 3))
        + SCAN,  # 3 components, 0 listed
        b"\xff\xd8"
        + segment(0xC0, struct.pack(">BHHB", 8, 0, 20, 1) + b"\x01\x11\x00")
        + SCAN,  # a height of 0 (JPEG's DNL, which no decoder here reads)
        b"\xff\xd8"
        + segment(0xC0, struct.pack(">BHHB", 8, 10, 0, 1) + b"\x01\x11\x00")
        + SCAN,  # a width of 0
        b"\xff\xd8\xff\xe0\x00\x01" + FRAME + SCAN,  # a length under 2
        b"\xff\xd8\xff\xe0\xff\xff" + FRAME + SCAN,  # a length past the end
        b"\xff\xd8\xff\xd9" + FRAME + SCAN,  # an end of image before the scan
        b"\xff\xd8\x00" + FRAME + SCAN,  # not a marker
        b"\xff\xd8" + b"\xff" * (MAX_SEGMENTS + 1) + FRAME + SCAN,  # fill past the bound
        b"\x89PNG\r\n\x1a\n",
        b"",
    ],
)
def test_a_header_it_cannot_follow_is_none(data):
    assert jpeg_header(data) is None


def test_fill_bytes_and_other_segments_are_walked_past():
    data = b"\xff\xd8" + segment(0xFE, b"a comment") + b"\xff\xff" + FRAME + SCAN
    assert jpeg_header(data) == JpegHeader(10, 20, 1, 8, 0xC0, 1, True)


@pytest.mark.parametrize(
    "tiff",
    [
        b"II*\x00\xff\xff\x00\x00",  # IFD0 past the segment
        b"II*\x00\x08\x00\x00\x00\xff\xff",  # more entries than the segment holds
        b"XX*\x00\x08\x00\x00\x00",  # no byte order
        b"II+\x00\x08\x00\x00\x00",  # not TIFF
        # the tag off an entry's start, then an orientation of 9
        b"II*\x00\x08\x00\x00\x00\x02\x00\x00\x00\x12\x01" + bytes(8)
        + b"\x12\x01\x03\x00\x01\x00\x00\x00\x09\x00\x00\x00",
    ],
)  # fmt: skip
def test_exif_it_cannot_use_leaves_the_orientation_at_1(tiff):
    data = b"\xff\xd8" + segment(0xE1, b"Exif\x00\x00" + tiff) + FRAME + SCAN
    assert jpeg_header(data) == JpegHeader(10, 20, 1, 8, 0xC0, 1, True)


@given(st.binary(max_size=300))
def test_random_bytes_never_raise(data):
    header = jpeg_header(data)
    assert header is None or isinstance(header, JpegHeader)
    assert (
        jpeg_header(b"\xff\xd8" + data) is None
        or 1 <= jpeg_header(b"\xff\xd8" + data).orientation <= 8
    )


REAL = pil_jpeg(24, 32, orientation=6)


@given(
    cut=st.integers(0, len(REAL)),
    edits=st.lists(st.tuples(st.integers(0, len(REAL) - 1), st.integers(0, 255)), max_size=8),
)
def test_a_damaged_real_jpeg_never_raises(cut, edits):
    data = bytearray(REAL[:cut])
    for at, value in edits:
        if at < len(data):
            data[at] = value
    header = jpeg_header(bytes(data))
    if header is not None:
        assert 1 <= header.orientation <= 8 and 0 <= header.height < 2**16


def test_a_packed_batch_brings_its_header_table_from_the_collate():
    images = [pil_jpeg(20, 30, orientation=8), b"not a jpeg", opencv_jpeg(16, 12, gray=True)]
    batch = EncodedBatch.pack(images)
    assert batch.headers.tolist() == [
        [20, 30, 3, 8, 0xC0, 8, 1],
        [0] * 7,
        [16, 12, 1, 8, 0xC0, 1, 1],
    ]
    assert np.array_equal(header_table(batch.data.numpy().data, batch.offsets), batch.headers)
