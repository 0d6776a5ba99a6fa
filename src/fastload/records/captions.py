"""Image-text pairs to convert into shards, each sample an image member and a ``txt``
member (the layout of most public image-text sets): from a folder where each image has
its caption beside it (``cat.jpg`` and ``cat.txt``), or from a CSV or JSON Lines file of
``(path, caption)`` rows (paths relative to that file's folder).

Example:
    >>> import tempfile
    >>> from fastload import make_image_folder
    >>> folder = make_image_folder(tempfile.mkdtemp(), num_classes=1, images_per_class=2,
    ...                            size=(32, 24), progress=False)
    >>> for image in folder.rglob("*.jpg"):
    ...     _ = image.with_suffix(".txt").write_text(f"a picture named {image.stem}")
    >>> pairs = captioned_source(folder)
    >>> len(pairs), pairs.text(0)
    (2, 'a picture named img_00000')
"""

from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass
from pathlib import Path

from fastload.records.sources import Encoding, FileSource

__all__ = ["CaptionedFiles", "captioned_source"]

_PATH_COLUMNS, _TEXT_COLUMNS = ("path", "image", "file"), ("caption", "text", "txt")


@dataclass
class CaptionedFiles:
    """Image files and a caption each: their records, and the text of each."""

    files: FileSource
    texts: list[str]

    @property
    def description(self) -> str:
        return self.files.description

    classes = None
    fields = None

    def __len__(self) -> int:
        return len(self.files)

    def name(self, position: int) -> str:
        return self.files.name(position)

    def record(self, position: int, encoding: Encoding) -> bytes:
        return self.files.record(position, encoding)

    def text(self, position: int) -> str:
        return self.texts[position]


def captioned_source(source: str | os.PathLike[str]) -> CaptionedFiles:
    """The pairs in a folder of images with captions beside them, or in a ``.csv`` or
    ``.jsonl`` file of ``path`` and ``caption`` (or ``image``/``text``) columns.

    Raises:
        FileNotFoundError: The folder or file, an image a row names, or an image's
            caption file is missing (named).
        ValueError: A file of another kind, a row without a path or a caption (its line
            named).
    """
    from torchvision.datasets.folder import IMG_EXTENSIONS  # the image folder's suffixes

    path = Path(source)
    if path.is_dir():
        images = sorted(p for p in path.rglob("*") if p.suffix.lower() in IMG_EXTENSIONS)
        rows = []
        for image in images:
            caption = image.with_suffix(".txt")
            if not caption.is_file():
                raise FileNotFoundError(f"{image}: no caption beside it ({caption.name})")
            rows.append((str(image), caption.read_text(encoding="utf-8").strip()))
        where = f"images with captions in {path.resolve()}"
    elif path.suffix.lower() in (".csv", ".jsonl"):
        rows = _rows(path)
        where = f"image-text pairs listed in {path.resolve()}"
    else:
        raise ValueError(
            f"{path}: captions come from a folder (cat.jpg beside cat.txt) or a .csv or "
            ".jsonl file of path and caption"
        )
    for listed, _ in rows:
        if not Path(listed).is_file():
            raise FileNotFoundError(f"{listed}: no such image (listed in {path})")
    files = FileSource([(image, None) for image, _ in rows], None, where)
    return CaptionedFiles(files, [text for _, text in rows])


def _rows(listing: Path) -> list[tuple[str, str]]:
    """``(image path, caption)`` of each row, the path taken relative to the listing."""
    if not listing.is_file():
        raise FileNotFoundError(f"{listing}: no such file")
    with open(listing, encoding="utf-8", newline="") as file:
        if listing.suffix.lower() == ".csv":
            entries = [(number, row) for number, row in enumerate(csv.DictReader(file), 2)]
        else:
            entries = []
            for number, line in enumerate(file, 1):
                if line.strip():
                    try:
                        entries.append((number, json.loads(line)))
                    except ValueError as error:
                        raise ValueError(f"{listing}:{number}: not JSON ({error})") from None
    rows = []
    for number, entry in entries:
        found = isinstance(entry, dict)
        image = next((entry[c] for c in _PATH_COLUMNS if found and entry.get(c)), None)
        text = next((entry[c] for c in _TEXT_COLUMNS if found and entry.get(c) is not None), None)
        if not isinstance(image, str) or not isinstance(text, str):
            raise ValueError(f"{listing}:{number}: a row needs a path and a caption")
        rows.append((str(listing.parent / image), text))
    return rows
