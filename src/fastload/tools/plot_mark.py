"""The mark in a plot's metadata that says fastload wrote it, and its reading.

A plot is marked under the one key matplotlib writes for each format (PNG's ``Software``
text chunk, SVG's RDF creator, PDF's document-information ``Creator``, PostScript's
``%%Creator`` header comment), and a file counts as marked only when that very field,
found by the format's structure, holds the mark exactly: the words anywhere else (a
chart's title, a comment, an SVG's text) are not the mark, so a user's file is never
taken for one of fastload's plots. What cannot be read so is not marked.
"""

from __future__ import annotations

import re
import struct
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO
from xml.etree import ElementTree

__all__ = ["MARK_KEYS", "PLOT_MARK", "is_marked"]

#: In the metadata of every plot fastload writes, under the key of :data:`MARK_KEYS`.
PLOT_MARK = "fastload plot"
#: Format (the file's extension) -> the key of ``savefig``'s ``metadata`` that holds the
#: mark; the formats not here keep no metadata, and a file of theirs is never replaced.
MARK_KEYS = {
    "png": "Software",
    "svg": "Creator",
    "pdf": "Creator",
    "ps": "Creator",
    "eps": "Creator",
}

_MARK = PLOT_MARK.encode()
_HEADER = 1 << 16  # the most read of a file's header (PNG's chunks, PostScript's comments)


def is_marked(path: Path) -> bool:
    """Whether ``path`` is a plot fastload wrote: its format's mark field (by the
    extension) holds :data:`PLOT_MARK` exactly. False for anything unreadable."""
    reader = _READERS.get(path.suffix.lower().lstrip("."))
    if reader is None:
        return False
    try:
        with path.open("rb") as file:
            return reader(file)
    except (OSError, ValueError, ElementTree.ParseError):  # not a readable file of ours
        return False


_PNG = b"\x89PNG\r\n\x1a\n"
_PNG_MARK = b"Software\0" + _MARK  # a tEXt chunk: keyword, NUL, text


def _png(file: BinaryIO) -> bool:
    """A ``tEXt`` chunk ``Software`` of the mark, its CRC right, before the image data
    (where matplotlib writes its text)."""
    if file.read(len(_PNG)) != _PNG:
        return False
    while file.tell() < _HEADER:
        head = file.read(8)
        if len(head) < 8:
            return False
        size, kind = struct.unpack(">I4s", head)
        if kind in (b"IDAT", b"IEND"):
            return False
        if kind == b"tEXt" and size == len(_PNG_MARK):
            data, crc = file.read(size), file.read(4)
            if data == _PNG_MARK and crc == zlib.crc32(kind + data).to_bytes(4, "big"):
                return True
        else:
            file.seek(size + 4, 1)  # the data and its CRC
    return False


_SVG = "{http://www.w3.org/2000/svg}"
_RDF = "{http://www.w3.org/1999/02/22-rdf-syntax-ns#}"
_CC = "{http://creativecommons.org/ns#}"
_DC = "{http://purl.org/dc/elements/1.1/}"
#: Where matplotlib's SVG keeps its creator: ``<svg><metadata><rdf:RDF><cc:Work>
#: <dc:creator><cc:Agent><dc:title>``.
_SVG_CREATOR = (
    f"{_SVG}svg",
    f"{_SVG}metadata",
    f"{_RDF}RDF",
    f"{_CC}Work",
    f"{_DC}creator",
    f"{_CC}Agent",
    f"{_DC}title",
)


def _svg(file: BinaryIO) -> bool:
    """The creator's title in the RDF of the ``<metadata>`` that opens the ``<svg>``
    (matplotlib's first element), parsed as XML up to that element's end only."""
    open_elements: list[str] = []
    for event, element in ElementTree.iterparse(file, events=("start", "end")):
        if event == "start":
            open_elements.append(element.tag)
            depth = len(open_elements)
            # off the path to the creator: allowed within the metadata only
            if depth <= 2 and tuple(open_elements) != _SVG_CREATOR[:depth]:
                return False
            continue
        if tuple(open_elements) == _SVG_CREATOR and element.text == PLOT_MARK:
            return True
        open_elements.pop()
        if len(open_elements) == 1:  # the metadata ended without the mark
            return False
    return False


_STARTXREF = re.compile(rb"startxref\s+(\d+)\s+%%EOF\s*$")
_XREF = re.compile(rb"xref\s+")
_SUBSECTION = re.compile(rb"(\d+) (\d+)\s+")
_ENTRY = re.compile(rb"(\d{10}) (\d{5}) ([nf])[ \r\n]{2}")
_TRAILER = re.compile(rb"trailer\s*<<(.*?)>>", re.DOTALL)
_INFO = re.compile(rb"/Info\s+(\d+)\s+0\s+R")
_OBJECT = re.compile(rb"(\d+)\s+0\s+obj\s*<<")
_NAME = re.compile(rb"\s*/([^\s/<>\[\]()]+)\s*")
_XREF_LIMIT = 1 << 20  # a plot's cross-reference table is a few kB


def _pdf(file: BinaryIO) -> bool:
    """The ``Creator`` of the document information dictionary, found as a reader finds
    it: ``startxref`` at the end, the cross-reference table, the trailer's ``/Info``,
    that object's dictionary (matplotlib writes a classic table and literal strings)."""
    size = file.seek(0, 2)
    file.seek(max(0, size - 1024))
    found = _STARTXREF.search(file.read())
    if found is None or size - int(found[1]) > _XREF_LIMIT:
        return False
    file.seek(int(found[1]))
    table = file.read(_XREF_LIMIT)
    opening = _XREF.match(table)
    if opening is None:
        return False
    offsets, at = {}, opening.end()
    while (subsection := _SUBSECTION.match(table, at)) is not None:
        first, count = int(subsection[1]), int(subsection[2])
        at = subsection.end()
        for number in range(first, first + count):
            entry = _ENTRY.match(table, at)
            if entry is None:
                return False
            if entry[3] == b"n":
                offsets[number] = int(entry[1])
            at = entry.end()
    trailer = _TRAILER.match(table, at)
    info = None if trailer is None else _INFO.search(trailer[1])
    if info is None or int(info[1]) not in offsets:
        return False
    file.seek(offsets[int(info[1])])
    data = file.read(4096)
    header = _OBJECT.match(data)
    if header is None or header[1] != info[1]:
        return False
    return _pdf_dictionary(data, header.end()).get(b"Creator") == _MARK


def _pdf_dictionary(data: bytes, at: int) -> dict[bytes, bytes]:
    """The entries of the dictionary from ``at`` (after its ``<<``) whose values are
    literal strings, as their raw bytes; empty at the first value of another kind (not
    an information dictionary matplotlib writes)."""
    entries: dict[bytes, bytes] = {}
    while (name := _NAME.match(data, at)) is not None:
        at = name.end()
        if data[at : at + 1] != b"(":
            return {}
        end = _string_end(data, at)
        if end is None:
            return {}
        entries[name[1]] = data[at + 1 : end]
        at = end + 1
    return entries if data[at:].lstrip().startswith(b">>") else {}


def _string_end(data: bytes, at: int) -> int | None:
    """The index of the ``)`` that closes the literal string opened at ``at`` (nested
    parentheses balance, a backslash escapes the next byte)."""
    depth, index = 0, at
    while index < len(data):
        byte = data[index]
        if byte == 0x5C:  # backslash
            index += 1
        elif byte == 0x28:
            depth += 1
        elif byte == 0x29:
            depth -= 1
            if depth == 0:
                return index
        index += 1
    return None


_CREATOR_LINE = b"%%Creator: " + _MARK


def _postscript(file: BinaryIO) -> bool:
    """``%%Creator:`` of the mark among the header comments (DSC: from ``%!PS-Adobe`` to
    ``%%EndComments`` or the first line that is not a ``%%`` comment)."""
    lines = file.read(_HEADER).splitlines()
    if not lines or not lines[0].startswith(b"%!PS-Adobe-"):
        return False
    for line in lines[1:]:
        if line == _CREATOR_LINE:
            return True
        if line == b"%%EndComments" or not line.startswith(b"%%"):
            return False
    return False


_READERS: dict[str, Callable[[BinaryIO], bool]] = {
    "png": _png,
    "svg": _svg,
    "pdf": _pdf,
    "ps": _postscript,
    "eps": _postscript,
}
