"""The JPEG header reader: PIL's sizes, components, coding and EXIF orientation on real
files, None (never an exception) on hostile bytes, and a bounded look at the tail."""

from __future__ import annotations

import io
import struct

import cv2
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from exif_images import LONG, Exif, encoded, exif_images, smooth_rgb
from fastload.collate import EncodedBatch
from fastload.decode.opencv import decode_image, displayed_size
from fastload.decode.orientation import orient
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


def assert_shown_as_opencv_decodes_it(data: np.ndarray) -> None:
    """The header's displayed size and orientation are OpenCV's: its image as stored,
    turned as the header says, is its decode, pixel for pixel (nvJPEG's images are
    turned so)."""
    header = jpeg_header(data)
    shown = decode_image(data)
    stored = cv2.imdecode(data, cv2.IMREAD_COLOR | cv2.IMREAD_IGNORE_ORIENTATION)
    stored = cv2.cvtColor(stored, cv2.COLOR_BGR2RGB)
    turned = orient(torch.from_numpy(stored).permute(2, 0, 1), header.orientation)
    assert header.displayed == shown.shape[:2]
    assert torch.equal(turned, torch.from_numpy(shown).permute(2, 0, 1))


# the files issue 64 found read otherwise than OpenCV decodes them, and their kin
AS_OPENCV_READS = {
    "LONG, little endian": [Exif(6, "<", LONG)],
    "LONG, big endian": [Exif(6, ">", LONG)],  # OpenCV reads the value's first 2 bytes: 0
    "two blocks, the first with 1": [Exif(1), Exif(6)],
    "two blocks, the first with 6": [Exif(6), Exif(3)],
    "two blocks, the first without the tag": [Exif(None), Exif(8)],
    "two blocks, the first with 0": [Exif(0), Exif(6)],
}


@pytest.mark.parametrize("blocks", AS_OPENCV_READS.values(), ids=AS_OPENCV_READS)
def test_the_header_shows_a_jpeg_as_opencv_decodes_it(blocks):
    assert_shown_as_opencv_decodes_it(encoded("jpeg", smooth_rgb(30, 50), blocks))


@settings(max_examples=100)
@given(image=exif_images(forms=["jpeg"]))
def test_every_exif_encoding_reads_as_opencv_applies_it(image):
    assert_shown_as_opencv_decodes_it(image[1])


# IFD0 tags: the orientation, OpenCV's text and rational tags (whose data past the block
# ends its reading), one it reads nothing of, one it does not know
IFD0_TAGS = [0x0112, 0x010F, 0x0110, 0x011A, 0x013F, 0x0214, 0x0128, 0x8769, 0x0100]


@st.composite
def damaged_exif(draw: st.DrawFn) -> bytes:
    """An EXIF block (after its ``Exif`` signature) as a careless or hostile writer makes
    it: either byte order or none, tags of any type and count, values that are offsets
    past the block, a directory that says more entries than it holds, cut anywhere."""
    o = draw(st.sampled_from("<>"))
    mark = draw(st.sampled_from([b"II" if o == "<" else b"MM"] * 3 + [b"XX", b"IM"]))
    value = st.one_of(
        st.integers(0, 9).map(lambda v: struct.pack(o + "HH", v, 0)),
        st.integers(0, 160).map(lambda v: struct.pack(o + "I", v)),
        st.binary(min_size=4, max_size=4),
    )
    entry = st.tuples(
        st.sampled_from(IFD0_TAGS), st.integers(0, 12), st.sampled_from([0, 1, 2, 5, 300]), value
    )
    entries = draw(st.lists(entry, max_size=5))
    listed = max(0, len(entries) + draw(st.sampled_from([0, 0, 1, -1, 9])))
    body = (
        mark
        + struct.pack(o + "HIH", 42, 8, listed)
        + b"".join(
            struct.pack(o + "HHI", tag, kind, count) + data for tag, kind, count, data in entries
        )
        + struct.pack(o + "I", 0)
    )
    return body[: draw(st.integers(0, len(body)) | st.just(len(body)))]


@settings(max_examples=300)
@given(blocks=st.lists(damaged_exif(), min_size=1, max_size=2))
def test_damaged_exif_reads_as_opencv_reads_it(blocks):
    jpeg = encoded("jpeg", smooth_rgb(16, 24), [])
    segments = b"".join(segment(0xE1, b"Exif\x00\x00" + block) for block in blocks)
    assert_shown_as_opencv_decodes_it(
        np.frombuffer(jpeg[:2].tobytes() + segments + jpeg[2:].tobytes(), np.uint8)
    )


def test_the_exif_blocks_with_an_orientation_are_counted():
    blocks = [Exif(1), Exif(None), Exif(6, ">")]
    header = jpeg_header(encoded("jpeg", smooth_rgb(30, 50), blocks))
    assert (header.orientation, header.orientation_tags) == (1, 2)
    assert jpeg_header(encoded("jpeg", smooth_rgb(30, 50), [])).orientation_tags == 0


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
    assert jpeg_header(data) == JpegHeader(10, 20, 1, 8, 0xC0, 1, True, 0)


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
    assert jpeg_header(data)[:7] == (10, 20, 1, 8, 0xC0, 1, True)


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
        [20, 30, 3, 8, 0xC0, 8, 1, 1],
        [0] * 8,
        [16, 12, 1, 8, 0xC0, 1, 1, 0],
    ]
    assert np.array_equal(header_table(batch.data.numpy().data, batch.offsets), batch.headers)
