from __future__ import annotations

import pickle
import struct

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fastload.records.format import (
    FORMAT_NAME,
    META_KEY,
    PROGRESS_KEY,
    RecordFormatError,
    decode_meta,
    encode_meta,
    index_key,
    pack_record,
    unpack_record,
)

DTYPES = st.sampled_from(["u1", "i2", "<u2", "<i4", "<f4", "<f8", "?", "<i8"])


def test_encoded_bytes_and_int_label_round_trip():
    record = unpack_record(pack_record(b"\xff\xd8jpeg", 7), what="k")
    assert record.encoded and record.payload == b"\xff\xd8jpeg" and record.label == 7


@given(
    array=hnp.arrays(DTYPES, hnp.array_shapes(min_dims=1, max_dims=4, max_side=6)),
    label=st.one_of(st.none(), st.integers(-(2**62), 2**62)),
)
def test_arrays_round_trip_exactly(array, label):
    record = unpack_record(pack_record(array, label), what="k", check=True)
    assert not record.encoded
    assert record.payload.dtype == array.dtype and record.payload.shape == array.shape
    assert np.array_equal(record.payload, array, equal_nan=array.dtype.kind == "f")
    assert record.label == label


def test_multi_label_arrays_and_numpy_scalars():
    labels = np.array([0, 1, 1, 0], np.uint8)
    assert np.array_equal(unpack_record(pack_record(b"x", labels), what="k").label, labels)
    assert unpack_record(pack_record(b"x", np.int64(4)), what="k").label == 4


def test_object_arrays_are_refused():
    with pytest.raises(
        TypeError, match="only bool, integer and float arrays of at most 64 bits can be stored"
    ):
        pack_record(np.array([object()]))


def test_keys_sort_in_index_order_and_before_the_metadata():
    keys = [index_key(i) for i in (0, 1, 9, 10, 99, 100, 12345)]
    assert sorted(keys) == keys
    assert max(keys) < META_KEY and max(keys) < PROGRESS_KEY
    assert index_key(42) == b"0000000042"


def test_a_pickle_is_recognised_and_refused_without_running_it():
    with pytest.raises(RecordFormatError, match=r"k: not a fastload record \(it holds a pickle"):
        unpack_record(pickle.dumps({"image": b"..."}), what="k")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (b"", "not a fastload record"),
        (b"FLR1", "not a fastload record"),
        (
            struct.pack("<4sBBBBIq", b"FLR1", 9, 0, 0, 0, 0, 0),
            "version 9 is newer than this fastload reads",
        ),
        (struct.pack("<4sBBBBIq", b"FLR1", 1, 7, 2, 0, 0, 0), "unknown payload kind 7"),
        (struct.pack("<4sBBBBIq", b"FLR1", 1, 0, 5, 0, 0, 0), "unknown label kind 5"),
        (struct.pack("<4sBBBBIq", b"FLR1", 1, 1, 2, 0, 0, 0) + b"\x03<u1\x01", "malformed array"),
        (
            struct.pack("<4sBBBBIq", b"FLR1", 1, 1, 2, 0, 0, 0) + b"\x03|O8\x00",
            "refusing array of dtype",
        ),
    ],
)
def test_malformed_records_raise_clear_errors(value, message):
    with pytest.raises(RecordFormatError, match=message):
        unpack_record(value, what="k")


def test_a_flipped_payload_byte_fails_the_crc_check():
    value = bytearray(pack_record(b"some image bytes", 1))
    value[-1] ^= 0xFF
    assert unpack_record(bytes(value), what="k").payload.endswith(bytes([ord("s") ^ 0xFF]))
    with pytest.raises(RecordFormatError, match="k: CRC-32 mismatch"):
        unpack_record(bytes(value), what="k", check=True)


def test_metadata_round_trip_and_errors():
    meta = {"format": FORMAT_NAME, "version": 1, "count": 3}
    assert decode_meta(encode_meta(meta), what="db") == meta
    with pytest.raises(RecordFormatError, match="db: metadata is not JSON"):
        decode_meta(pickle.dumps(meta), what="db")
    with pytest.raises(RecordFormatError, match="does not name the fastload-lmdb format"):
        decode_meta(encode_meta({"format": "other", "version": 1}), what="db")
    with pytest.raises(RecordFormatError, match="database format version 3 is newer"):
        decode_meta(encode_meta({"format": FORMAT_NAME, "version": 3}), what="db")
