"""Public WebDataset shards, without our index: scanned, nothing written beside them unless
asked (`fastload index`), the scan kept in a cache if given; a tar that cannot be indexed
is refused naming it."""

from __future__ import annotations

import gzip
import io
import json
import os
import pickle
import re
import tarfile
import warnings

import cv2
import numpy as np
import pytest

from fastload.shards import ShardedDataset
from fastload.shards.format.index import INDEX, ShardIndexError
from fastload.testing.synthetic import photo_like_image
from fastload.tools.cli import main


def jpeg(seed: int) -> bytes:
    return cv2.imencode(".jpg", photo_like_image(np.random.default_rng(seed), 24, 32))[1].tobytes()


def write_tar(path, members: list[tuple[str, bytes]]) -> None:
    with tarfile.open(path, "w") as archive:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))


def test_webdataset_shards_are_indexed_once_and_read(tmp_path):
    write_tar(tmp_path / "train-000000.tar", [
        ("part/000000.jpg", jpeg(0)), ("part/000000.cls", b"2"), ("part/000000.json", b"{}"),
        ("part/000001.jpg", jpeg(1)), ("part/000001.cls", b"0"),
    ])  # fmt: skip
    write_tar(tmp_path / "train-000001.tar", [("000002.jpg", jpeg(2)), ("000002.cls", b"1")])
    index = tmp_path / INDEX
    main(["index", str(tmp_path)])  # the one way an index is written beside them
    assert index.exists()
    with pytest.warns(UserWarning, match="each sample also holds json"):
        dataset = ShardedDataset(tmp_path)
    assert len(dataset) == 3
    assert [dataset[i][1] for i in range(3)] == [2, 0, 1]
    assert dataset[0][0].shape == (24, 32, 3)
    assert dataset.members(0).key(0) == "part/000000"
    dataset.verify()
    before = index.stat().st_mtime_ns
    assert len(ShardedDataset(tmp_path, keys="*")) == 3  # the index is read, not rebuilt
    assert index.stat().st_mtime_ns == before


def test_without_an_index_nothing_is_written_into_the_shards_folder(tmp_path):
    shards, cache = tmp_path / "shards", tmp_path / "cache"
    shards.mkdir()
    write_tar(shards / "a.tar", [("0.jpg", jpeg(0)), ("0.cls", b"1"), ("1.jpg", jpeg(1))])
    write_tar(shards / "b.tar", [("2.jpg", jpeg(2)), ("2.cls", b"0")])
    listing = sorted((p.name, p.stat().st_mtime_ns) for p in shards.iterdir())
    with pytest.warns(UserWarning, match=r"no index\.json: its 2 tar file\(s\) were read whole"):
        scanned = ShardedDataset(shards, keys=("jpg",))
    assert len(scanned) == 3 and scanned[2][0].shape == (24, 32, 3)
    kept = ShardedDataset(shards, keys=("jpg",), cache_dir=cache)  # scanned, kept in the cache
    again = ShardedDataset(shards, keys=("jpg",), cache_dir=cache)  # read from the cache
    assert [len(kept), len(again)] == [3, 3]
    assert [shard.sha256 for shard in again.shards] == [shard.sha256 for shard in scanned.shards]
    kept_scan = list((cache / "fastload-scans").glob(f"*/{INDEX}"))
    assert len(kept_scan) == 1 and json.loads(kept_scan[0].read_bytes())["version"] == 3
    tables = sorted(path.name for path in kept_scan[0].parent.glob("*.idx"))
    assert tables == ["a.tar.idx", "b.tar.idx"]  # beside the kept index, not the shards
    assert [again[index][0].shape for index in range(3)] == [(24, 32, 3)] * 3
    assert sorted((p.name, p.stat().st_mtime_ns) for p in shards.iterdir()) == listing
    write_tar(shards / "b.tar", [("2.jpg", jpeg(2)), ("2.cls", b"0"), ("3.jpg", jpeg(3))])
    assert len(ShardedDataset(shards, keys=("jpg",), cache_dir=cache)) == 4  # rewritten: rescanned


def test_fastload_index_refuses_an_existing_index_and_a_missing_folder(tmp_path, capsys):
    write_tar(tmp_path / "a.tar", [("0.jpg", jpeg(0)), ("0.cls", b"1")])
    main(["index", str(tmp_path)])
    assert capsys.readouterr().out == f"{tmp_path / INDEX}: 1 samples in 1 shards\n"
    before = (tmp_path / INDEX).read_bytes()
    for folder, message in [(tmp_path, "index.json exists; it is left as it is"),
                            (tmp_path / "nope", "no such folder")]:  # fmt: skip
        with pytest.raises(SystemExit) as stopped:
            main(["index", str(folder)])
        assert stopped.value.code == 2 and message in capsys.readouterr().err
    assert (tmp_path / INDEX).read_bytes() == before


def test_a_sample_spread_over_the_tar_is_refused(tmp_path):
    write_tar(tmp_path / "a.tar", [("1.jpg", jpeg(0)), ("2.jpg", jpeg(1)), ("1.cls", b"0")])
    with pytest.raises(
        ShardIndexError, match=r"a\.tar: the members of sample '1' are not adjacent"
    ):
        ShardedDataset(tmp_path)


def test_a_truncated_tar_is_refused_naming_it(tmp_path):
    write_tar(tmp_path / "a.tar", [("1.jpg", jpeg(0)), ("1.cls", b"0")])
    data = (tmp_path / "a.tar").read_bytes()
    (tmp_path / "a.tar").write_bytes(data[:700])  # cut inside the first member
    with pytest.raises(ShardIndexError, match=r"a\.tar"):
        ShardedDataset(tmp_path)
    assert not (tmp_path / INDEX).exists()


def test_member_names_that_climb_out_are_only_keys(tmp_path):
    # nothing is ever extracted: a name with "../" is a key, read by its offset
    write_tar(tmp_path / "a.tar", [("../../etc/0.jpg", jpeg(0)), ("../../etc/0.cls", b"4")])
    dataset = ShardedDataset(tmp_path)
    assert dataset[0][1] == 4 and not (tmp_path.parent.parent / "etc" / "0.jpg").exists()


def test_shard_names_with_spaces_and_keys_of_any_script_are_indexed_and_read(tmp_path):
    members = [("v0.jpg", jpeg(0)), ("v0.café", b"au lait"),
               ("données/é1.jpg", jpeg(1)), ("données/é1.cls", b"3")]  # fmt: skip
    write_tar(tmp_path / "train 0.tar", members)
    with pytest.warns(UserWarning, match="each sample also holds café"):
        dataset = ShardedDataset(tmp_path)
    assert [shard.name for shard in dataset.shards] == ["train 0.tar"]
    assert dataset.members(0).keys == ["v0", "données/é1"]
    assert sorted(dataset.members(0).members(0)) == ["café", "jpg"]
    assert dataset[1][1] == 3 and dataset[0][0].shape == (24, 32, 3)
    assert len(ShardedDataset(tmp_path, keys="*")) == 2  # the index written loads again


def sparse_member(path) -> None:
    """A tar whose second member is a GNU sparse file: its stored bytes are not what it
    reads as (tarfile reads sparse members, it does not write them: GNU tar does)."""
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as archive:
        info = tarfile.TarInfo("a.jpg")
        data = jpeg(0)
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
        info = tarfile.TarInfo("b.jpg")
        info.type, info.size = tarfile.GNUTYPE_SPARSE, 0
        archive.addfile(info)


@pytest.mark.parametrize(
    ("make", "kind"),
    [
        (sparse_member, "is a sparse file"),
        (lambda path: write_tar_with(path, tarfile.SYMTYPE, "a.jpg"), "is a link to 'a.jpg'"),
        (lambda path: write_tar_with(path, tarfile.LNKTYPE, "a.jpg"), "is a link to 'a.jpg'"),
        (lambda path: write_tar_with(path, tarfile.CHRTYPE, ""), "is a device or a FIFO"),
    ],
)
def test_members_that_cannot_be_read_at_an_offset_are_refused_and_no_index_written(
    tmp_path, make, kind
):
    make(tmp_path / "odd.tar")
    with pytest.raises(ShardIndexError, match=f"odd\\.tar: member 'b\\.jpg' {kind}"):
        ShardedDataset(tmp_path)
    assert not (tmp_path / INDEX).exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["odd.tar"]  # nothing half-written


def write_tar_with(path, type_: bytes, link: str) -> None:
    """A tar of a.jpg and a member b.jpg of ``type_`` (a link to ``link``, a device)."""
    with tarfile.open(path, "w") as archive:
        data = jpeg(0)
        info = tarfile.TarInfo("a.jpg")
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
        info = tarfile.TarInfo("b.jpg")
        info.type, info.linkname = type_, link
        archive.addfile(info)


@pytest.fixture
def captioned(tmp_path):
    """Image-text shards as most public sets are written: WebDataset's own TarWriter,
    jpg + txt + json + cls per sample."""
    wds = pytest.importorskip("webdataset", reason="needs webdataset: pip install webdataset")
    for number in range(2):
        with wds.TarWriter(str(tmp_path / f"pairs-{number}.tar")) as sink:
            for index in range(3 * number, 3 * number + 3):
                sink.write({"__key__": f"sample{index:03d}", "jpg": jpeg(index),
                            "txt": f"a photo, number {index} — été", "cls": index % 2,
                            "json": {"width": 32, "tags": ["x", index]}})  # fmt: skip
    return tmp_path


def test_image_text_samples_come_whole_as_webdataset_reads_them(captioned):
    import webdataset as wds

    theirs = list(
        wds.WebDataset(sorted(str(p) for p in captioned.glob("*.tar")), shardshuffle=False)
        .decode("rgb8").to_tuple("jpg", "txt", "json", "cls")
    )  # fmt: skip
    ours = ShardedDataset(captioned, keys=("jpg", "txt", "json", "cls"))
    assert len(ours) == len(theirs) == 6
    for index, (image, text, meta, label) in enumerate(theirs):
        mine = ours[index]
        assert mine[1:] == (text, meta, label)
        assert mine[0].shape == image.shape and np.abs(mine[0].astype(int) - image).mean() < 1
    every = ShardedDataset(captioned, keys="*")[4]
    assert sorted(every) == ["cls", "jpg", "json", "txt"] and every["txt"].endswith("été")


def test_reading_image_and_label_only_says_what_it_leaves_out(captioned):
    with pytest.warns(UserWarning, match=r"each sample also holds json, txt.*keys="):
        image, label = ShardedDataset(captioned)[1]
    assert label == 1 and image.shape == (24, 32, 3)


def test_a_member_missing_or_not_what_its_extension_says_is_named(captioned, tmp_path):
    with pytest.raises(ShardIndexError, match=r"pairs-0\.tar:sample000: no mp4 member"):
        ShardedDataset(captioned, keys=("jpg", "mp4"))[0]
    (tmp_path / "odd").mkdir()
    write_tar(tmp_path / "odd" / "odd.tar", [("a.jpg", jpeg(0)), ("a.json", b"{not json")])
    with pytest.raises(ShardIndexError, match=r"odd\.tar:a: its json member b'\{not json'"):
        ShardedDataset(tmp_path / "odd", keys=("jpg", "json"))[0]
    with pytest.raises(ValueError, match="keys: extensions such as"):
        ShardedDataset(captioned, keys="jpg")


@pytest.fixture
def pairs_folder(tmp_path):
    """Three photos with a caption file each, and the same pairs listed in CSV and JSONL."""
    folder = tmp_path / "pairs"
    folder.mkdir()
    captions = ["a red kite", "deux chats, «été»", "line one\nline two"]
    for index, caption in enumerate(captions):
        (folder / f"p{index}.jpg").write_bytes(jpeg(index))
        (folder / f"p{index}.txt").write_text(caption, encoding="utf-8")
    import csv
    import json

    with open(tmp_path / "pairs.csv", "w", newline="", encoding="utf-8") as file:
        writer = csv.writer(file)
        writer.writerow(["path", "caption"])
        writer.writerows([[f"pairs/p{i}.jpg", text] for i, text in enumerate(captions)])
    (tmp_path / "pairs.jsonl").write_text("".join(
        json.dumps({"image": f"pairs/p{i}.jpg", "text": text}) + "\n"
        for i, text in enumerate(captions)
    ), encoding="utf-8")  # fmt: skip
    return tmp_path, captions


@pytest.mark.parametrize("listing", ["pairs", "pairs.csv", "pairs.jsonl"])
def test_image_text_pairs_convert_to_shards_read_back_as_webdataset_reads_them(
    pairs_folder, listing
):
    from fastload.shards import write_shards

    root, captions = pairs_folder
    out = root / f"shards-{listing.replace('.', '-')}"
    meta = write_shards(root / listing, out, captions=True)
    assert meta["samples"] == 3
    pairs = ShardedDataset(out, keys=("jpg", "txt"))
    assert [pairs[i][1] for i in range(3)] == captions
    assert [pairs[i][0].shape for i in range(3)] == [(24, 32, 3)] * 3
    wds = pytest.importorskip("webdataset", reason="needs webdataset: pip install webdataset")
    theirs = list(wds.WebDataset(str(next(out.glob("*.tar"))), shardshuffle=False)
                  .decode().to_tuple("txt"))  # fmt: skip
    assert [text for (text,) in theirs] == captions


def test_a_pair_without_its_caption_or_image_is_named(pairs_folder, tmp_path):
    from fastload.shards import write_shards

    root, _ = pairs_folder
    (root / "pairs" / "p1.txt").unlink()
    with pytest.raises(FileNotFoundError, match=r"p1\.jpg: no caption beside it \(p1\.txt\)"):
        write_shards(root / "pairs", tmp_path / "out", captions=True)
    (root / "broken.jsonl").write_text('{"image": "pairs/missing.jpg", "text": "x"}\n')
    with pytest.raises(FileNotFoundError, match=r"missing\.jpg: no such image"):
        write_shards(root / "broken.jsonl", tmp_path / "out2", captions=True)
    (root / "short.csv").write_text("path,caption\npairs/p0.jpg\n")
    with pytest.raises(ValueError, match=r"short\.csv:2: a row needs a path and a caption"):
        write_shards(root / "short.csv", tmp_path / "out3", captions=True)


def scanned(folder, cache, how, **options):
    """``folder``'s shards through one entry point that scans them: a scan at each start,
    one kept in ``cache``, or ``fastload index`` (its errors raised as ShardIndexError)."""
    if how == "index":
        try:
            main(["index", str(folder)])
        except SystemExit as stopped:  # one line, exit 2: the error behind it
            assert stopped.code == 2
            raise ShardIndexError(str(stopped.__context__)) from None
        return ShardedDataset(folder, **options)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the scan at each start says so
        return ShardedDataset(folder, cache_dir=cache if how == "kept" else None, **options)


ENTRIES = ["scan", "kept", "index"]


def png(seed: int) -> bytes:
    image = np.random.default_rng(seed).integers(0, 255, (6, 7, 3), dtype=np.uint8)
    return cv2.imencode(".png", image)[1].tobytes()


@pytest.fixture
def multimodal(tmp_path):
    """What multi-modal and multilingual sets write with WebDataset's TarWriter: dotted,
    dashed and underscored extensions, one gzip member."""
    wds = pytest.importorskip("webdataset", reason="needs webdataset: pip install webdataset")
    folder = tmp_path / "set"
    folder.mkdir()
    with wds.TarWriter(str(folder / "mm-0.tar")) as sink:
        for index in range(2):
            depth = io.BytesIO()
            np.save(depth, np.arange(6, dtype=np.float32).reshape(2, 3) * index)
            sink.write({"__key__": f"s{index}", "jpg": jpeg(index), "seg.png": png(index),
                        "seg_mask.png": png(index + 10), "depth_map.npy": depth.getvalue(),
                        "text-en.txt": f"a cat {index}", "Text.FR.TXT": f"un chat {index}",
                        "depth_map": b"raw", "json.gz": {"n": index}})  # fmt: skip
    return folder


@pytest.mark.parametrize("how", ENTRIES)
def test_every_member_is_named_and_decoded_by_its_last_extension_as_webdataset_does(
    multimodal, tmp_path, how
):
    import webdataset as wds

    theirs = list(wds.WebDataset(str(multimodal / "mm-0.tar"), shardshuffle=False).decode("rgb8"))
    ours = scanned(multimodal, tmp_path / "cache", how, keys="*")
    assert len(ours) == len(theirs) == 2
    for index, sample in enumerate(theirs):
        mine = ours[index]
        extensions = sorted(k for k in sample if not k.startswith("__"))
        # each of WebDataset's names, lowercased, '.' and '-' as '_'
        assert sorted(mine) == sorted(k.replace(".", "_").replace("-", "_") for k in extensions)
        for extension in extensions:
            value, own = sample[extension], mine[extension.replace(".", "_").replace("-", "_")]
            if isinstance(value, np.ndarray) and value.dtype == np.uint8 and value.ndim == 3:
                assert own.shape == value.shape  # an image: the PNGs are lossless
                if extension != "jpg":
                    np.testing.assert_array_equal(own, value)
            elif isinstance(value, np.ndarray):
                np.testing.assert_array_equal(own, value)
            else:
                assert own == value, extension
    assert isinstance(ours[1]["seg_png"], np.ndarray) and ours[1]["json_gz"] == {"n": 1}
    assert ours[1]["depth_map"] == b"raw" and ours[1]["text_en_txt"] == "a cat 1"


def test_keys_take_webdataset_names_or_the_index_names(multimodal, tmp_path):
    both = [scanned(multimodal, tmp_path, "kept", keys=keys)[1]
            for keys in [("jpg", "seg.png", "text-en.txt", "TEXT.fr.txt"),
                         ("jpg", "seg_png", "text_en_txt", "text_fr_txt")]]  # fmt: skip
    for image, mask, english, french in both:
        assert image.shape == (24, 32, 3) and mask.shape == (6, 7, 3)
        assert (english, french) == ("a cat 1", "un chat 1")
    with pytest.raises(ShardIndexError, match=r"mm-0\.tar:s0: no seg_mask_jpg member"):
        scanned(multimodal, tmp_path, "kept", keys=("seg_mask.jpg",))[0]


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ((), r"keys: extensions such as \('jpg', 'txt'\), '\*' for every member or None"),
        ([], r"keys: extensions such as .* not \[\]"),
        ("jpg", r"keys: extensions such as .* not 'jpg'"),
        (b"jpg", r"keys: extensions such as .* not b'jpg'"),
        (3, r"keys: extensions such as .* not 3"),
        (("jpg", 7), r"keys: 7 is not an extension"),
        (("jpg;png",), r"keys: extension 'jpg;png' has no name in a shard index"),
        (("",), r"keys: extension '' has no name in a shard index"),
    ],
)
def test_keys_that_name_no_member_are_refused_naming_keys(captioned, keys, message):
    with pytest.raises(ValueError, match=message):
        ShardedDataset(captioned, keys=keys)


@pytest.mark.parametrize("how", ENTRIES)
@pytest.mark.parametrize(
    ("first", "second"),
    [("x.jpg", "x.JPG"), ("x.depth.map", "x.depth_map"), ("x.text-en.txt", "x.text.en.txt")],
)
def test_two_members_of_one_name_in_a_sample_are_refused_naming_both(tmp_path, how, first, second):
    folder = tmp_path / "set"
    folder.mkdir()
    write_tar(folder / "a.tar", [("w.jpg", jpeg(0)), (first, jpeg(1)), (second, jpeg(2))])
    if first.lower() == second.lower():  # WebDataset refuses this tar too
        wds = pytest.importorskip("webdataset", reason="needs webdataset")
        with pytest.raises(ValueError, match="duplicate file name"):
            list(wds.WebDataset(str(folder / "a.tar"), shardshuffle=False))
    name = first.partition(".")[2].lower().replace(".", "_").replace("-", "_")
    with pytest.raises(
        ShardIndexError,
        match=rf"a\.tar: sample 'x' has two members named '{name}': "
        rf"'{re.escape(first)}' and '{re.escape(second)}'",
    ):
        scanned(folder, tmp_path / "cache", how)
    assert sorted(path.name for path in folder.iterdir()) == ["a.tar"]  # nothing written


@pytest.mark.parametrize("how", ENTRIES)
@pytest.mark.parametrize(
    ("member", "message"),
    [
        ("x.a+b", r"member 'x\.a\+b': extension 'a\+b' has no name in a shard index"),
        ("x.", r"member 'x\.': extension '' has no name in a shard index"),
        ("x.en_txt", r"member 'x\.en_txt': the index names it 'en_txt', which would be "
                     r"decoded as \.txt, where WebDataset keeps it as bytes"),
        ("x.seg-png.gz", r"member 'x\.seg-png\.gz': the index names it 'seg_png_gz', which "
                         r"would be decoded as \.png"),
    ],
)  # fmt: skip
def test_a_member_the_index_cannot_name_as_webdataset_reads_it_is_refused(
    tmp_path, how, member, message
):
    folder = tmp_path / "set"
    folder.mkdir()
    write_tar(folder / "a.tar", [("x.jpg", jpeg(0)), (member, gzip.compress(b"data"))])
    wds = pytest.importorskip("webdataset", reason="needs webdataset")
    assert len(list(wds.WebDataset(str(folder / "a.tar"), shardshuffle=False))) == 1
    with pytest.raises(ShardIndexError, match=r"a\.tar: " + message):
        scanned(folder, tmp_path / "cache", how)
    assert sorted(path.name for path in folder.iterdir()) == ["a.tar"]


def test_members_webdataset_leaves_out_are_left_out(tmp_path):
    write_tar(tmp_path / "a.tar", [("__meta__", b"m"), ("__cache__/0.jpg", jpeg(9)),
                                   ("README", b"r"), (".hidden", b"h"),
                                   ("0.jpg", jpeg(0)), ("0.cls", b"1")])  # fmt: skip
    wds = pytest.importorskip("webdataset", reason="needs webdataset")
    theirs = list(wds.WebDataset(str(tmp_path / "a.tar"), shardshuffle=False))
    ours = scanned(tmp_path, None, "scan", keys="*")
    assert [sample["__key__"] for sample in theirs] == ours.members(0).keys == ["0"]
    assert sorted(ours[0]) == ["cls", "jpg"]


def latin1_tar(path) -> None:
    """A tar whose member names are Latin-1 bytes, as old tools wrote them."""
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT, encoding="latin-1") as archive:
        for name, data in [("café.jpg", jpeg(0)), ("café.cls", b"1")]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))


@pytest.mark.parametrize("how", ENTRIES)
def test_member_names_that_are_not_utf8_are_refused_naming_the_tar_and_member(tmp_path, how):
    folder = tmp_path / "set"
    folder.mkdir()
    latin1_tar(folder / "old.tar")
    assert b"caf\xe9.jpg" in (folder / "old.tar").read_bytes()
    with pytest.raises(
        ShardIndexError, match=r"old\.tar: member name b'caf\\xe9\.jpg' is not UTF-8"
    ):
        scanned(folder, tmp_path / "cache", how)
    assert sorted(path.name for path in folder.iterdir()) == ["old.tar"]
    os.replace(folder / "old.tar", folder / os.fsdecode(b"caf\xe9.tar"))
    with pytest.raises(ShardIndexError, match=r"shard file name b'caf\\xe9\.tar' is not UTF-8"):
        scanned(folder, tmp_path / "cache", how)


def test_a_gzip_member_is_read_whole_and_a_gzip_bomb_or_cut_one_is_refused(tmp_path, monkeypatch):
    from fastload.shards.format import members

    two_parts = gzip.compress(b"a cat ") + gzip.compress(b"on a mat")  # as `cat a.gz b.gz`
    members_of = [("0.jpg", jpeg(0)), ("0.txt.gz", two_parts),
                  ("1.jpg", jpeg(1)), ("1.txt.gz", gzip.compress(b"0" * 5000)),
                  ("2.jpg", jpeg(2)), ("2.txt.gz", gzip.compress(b"short")[:-4])]  # fmt: skip
    write_tar(tmp_path / "a.tar", members_of)
    main(["index", str(tmp_path)])
    dataset = ShardedDataset(tmp_path, keys=("txt.gz",))
    assert dataset[0] == ("a cat on a mat",)
    monkeypatch.setattr(members, "MAX_GUNZIPPED", 4096)
    with pytest.raises(ShardIndexError, match=r"txt_gz member decompresses to more than 4,096"):
        dataset[1]
    with pytest.raises(ShardIndexError, match="txt_gz member is gzip cut short"):
        dataset[2]


@pytest.fixture
def gzipped(tmp_path):
    """WebDataset shards whose first sample's text decompresses to 5,000 bytes."""
    samples = [
        ("0.jpg", jpeg(0)),
        ("0.txt.gz", gzip.compress(b"0" * 5000)),
        ("1.jpg", jpeg(1)),
        ("1.txt.gz", gzip.compress(b"a cat")),
    ]
    write_tar(tmp_path / "a.tar", samples)
    main(["index", str(tmp_path)])
    return tmp_path


def test_the_limits_travel_with_a_pickled_sharded_dataset(gzipped, monkeypatch):
    from fastload.decode import opencv
    from fastload.shards.format import members

    monkeypatch.setattr(members, "MAX_GUNZIPPED", 4096)
    monkeypatch.setattr(opencv, "MAX_PIXELS", None)
    sent = pickle.dumps(ShardedDataset(gzipped, keys=("txt.gz",)))
    monkeypatch.setattr(members, "MAX_GUNZIPPED", 1 << 30)  # as a fresh process has them
    monkeypatch.setattr(opencv, "MAX_PIXELS", 178_956_970)
    received = pickle.loads(sent)
    assert (members.MAX_GUNZIPPED, opencv.MAX_PIXELS) == (4096, None)
    with pytest.raises(ShardIndexError, match=r"txt_gz member decompresses to more than 4,096"):
        received[0]


@pytest.mark.slow
def test_the_gunzip_limit_set_in_the_main_process_reaches_a_spawned_worker(gzipped, monkeypatch):
    from fastload import FastLoader
    from fastload.shards.format import members

    # lowered, as a raised one is set: a worker at the default would read the member
    monkeypatch.setattr(members, "MAX_GUNZIPPED", 4096)
    loader = FastLoader(
        ShardedDataset(gzipped, keys=("txt.gz",)),
        batch_size=1,
        num_workers=1,
        multiprocessing_context="spawn",
    )
    with pytest.raises(
        ShardIndexError,
        match=r"(?s)in DataLoader worker process 0\..*"
        r"txt_gz member decompresses to more than 4,096 bytes",
    ):
        next(iter(loader))
