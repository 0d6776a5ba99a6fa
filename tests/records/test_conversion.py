"""Both writers take one set of source options, read and checked in one place."""

from __future__ import annotations

import pytest

from fastload import write_lmdb
from fastload.records.conversion import Conversion, SourceOptions
from fastload.shards import write_shards
from fastload.testing.shapes import ShapesDetection

WRITERS = [("write_lmdb", write_lmdb, "out.lmdb"), ("write_shards", write_shards, "shards")]


@pytest.mark.parametrize(("name", "writer", "target"), WRITERS)
def test_a_misspelt_option_is_refused_by_name_before_anything_is_written(
    name, writer, target, tmp_path
):
    with pytest.raises(
        TypeError, match=rf"^{name}\(\) got an unexpected keyword argument 'resise'$"
    ):
        writer(ShapesDetection(2, size=(16, 16)), tmp_path / target, resise=32)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("name", "writer", "target"), WRITERS)
@pytest.mark.parametrize(
    ("option", "message"),
    [({"quality": 0}, "quality must be"), ({"quality": 101}, "quality must be"),
     ({"resize": 0}, "resize must be")],
)  # fmt: skip
def test_both_writers_check_the_encoding_alike(name, writer, target, option, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        writer(ShapesDetection(2, size=(16, 16)), tmp_path / target, **option)
    assert list(tmp_path.iterdir()) == []


def test_every_option_has_its_default_and_its_documentation():
    defaults = Conversion()
    assert set(SourceOptions.__optional_keys__) == set(defaults.__dataclass_fields__)
    assert (defaults.resume, defaults.skip_bad, defaults.encoding.keeps_files) == (
        False, False, True,
    )  # fmt: skip
    for name in SourceOptions.__optional_keys__:
        assert f"    {name}: " in SourceOptions.__doc__, name
