"""How a tar member's name becomes a sample key and the name the index gives the member:
the one rule of every scan of WebDataset tars (kept or not, ``fastload index``) and of
``keys=`` (:func:`selected_members`).

The split is WebDataset's (``base_plus_ext``): the key is the name up to the first dot of
its last part, the extension the rest, lowercased (``a/0.Seg.PNG``: ``a/0``, ``seg.png``);
the members WebDataset skips (no extension, ``__meta__`` names) are skipped. The index
names a member with letters (of any script), digits and ``_``, so ``.`` and ``-`` become
``_`` (``seg.png``: ``seg_png``, ``text-en.txt``: ``text_en_txt``); an extension with any
other character has no name there.

Example:
    >>> split_member("part/000.Seg.PNG")
    ('part/000', 'seg.png')
    >>> member_name("text-en.txt")
    'text_en_txt'
    >>> selected_members(("jpg", "seg.png"))
    ('jpg', 'seg_png')
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["member_name", "selected_members", "split_member"]

# webdataset's base_plus_ext and skip_meta, as they are
_SPLIT = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")
_META = re.compile(r"__[^/]*__($|/)")
_NAMED = re.compile(r"\w+")  # the index's extensions (whole names: no trailing newline)


def split_member(name: str) -> tuple[str, str] | None:
    """The key and the lowercased extension of tar member ``name`` as WebDataset splits
    it, or None for a member WebDataset leaves out of every sample."""
    if _META.match(name) or ("/" not in name and name.startswith("__") and name.endswith("__")):
        return None
    found = _SPLIT.match(name)
    return None if found is None else (found[1], found[2].lower())


def member_name(extension: str) -> str:
    """The index's name of the member of ``extension`` (lowercased; ``.`` and ``-`` as
    ``_``): what ``keys=`` and a sample's dict name it by.

    Raises:
        ValueError: An extension the index cannot name (empty, or a character other than
            letters, digits, ``_``, ``.`` and ``-``), saying so.
    """
    named = extension.lower().replace(".", "_").replace("-", "_")
    if not _NAMED.fullmatch(named):
        raise ValueError(
            f"extension {extension!r} has no name in a shard index (letters, digits, "
            "'_', '.' and '-' only)"
        )
    return named


def selected_members(keys: Sequence[str] | str | None) -> tuple[str, ...] | str | None:
    """A dataset's ``keys=``, checked: None (``(image, label)``), ``"*"`` (every member),
    or the index's names of the extensions given, in their order.

    Raises:
        ValueError: Another string, no extension, or one the index cannot name, naming
            ``keys``.
    """
    if keys is None or keys == "*":
        return keys
    usage = "extensions such as ('jpg', 'txt'), '*' for every member or None for (image, label)"
    try:
        given = () if isinstance(keys, (str, bytes)) else tuple(keys)
    except TypeError:
        given = ()
    if not given:
        raise ValueError(f"keys: {usage}; not {keys!r}")
    names = []
    for key in given:
        if not isinstance(key, str):
            raise ValueError(f"keys: {key!r} is not an extension: {usage}")
        try:
            names.append(member_name(key))
        except ValueError as error:
            raise ValueError(f"keys: {error}") from None
    return tuple(names)
