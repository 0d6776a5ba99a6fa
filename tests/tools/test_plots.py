"""Which file is a plot fastload wrote: its mark read where the format keeps it, not the
text found anywhere in the file."""

from __future__ import annotations

import os

import pytest

from fastload.tools.plots import PLOT_MARK, check_replaceable, plot_workers

matplotlib = pytest.importorskip("matplotlib", reason="plots need matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def users_chart(path, metadata):
    """A user's own matplotlib chart at ``path``, saved with ``metadata``."""
    fig, ax = plt.subplots(figsize=(2, 2))
    ax.plot([0, 1], [1, 0])
    ax.set_title(PLOT_MARK)  # the words on the chart too (SVG, PDF, PS keep them as text)
    try:
        fig.savefig(path, metadata=metadata)
    finally:
        plt.close(fig)


# the mark's words under every key but the one fastload writes it under
OTHER_KEYS = {
    "png": {"Title": PLOT_MARK, "Comment": PLOT_MARK, "Description": PLOT_MARK},
    "svg": {"Title": PLOT_MARK, "Description": PLOT_MARK, "Keywords": [PLOT_MARK]},
    "pdf": {"Title": PLOT_MARK, "Subject": PLOT_MARK, "Producer": PLOT_MARK},
    "eps": {},  # PostScript's title is the file's name: see below
    "ps": {},
}


@pytest.mark.parametrize("extension", sorted(OTHER_KEYS))
def test_the_marks_words_elsewhere_in_a_users_file_are_not_the_mark(tmp_path, extension):
    path = tmp_path / f"chart.{extension}"
    users_chart(path, OTHER_KEYS[extension])
    if extension in ("eps", "ps"):  # the words as the title, in the header's comments
        path.write_bytes(path.read_bytes().replace(b"%%Title: chart.", b"%%Title: fastload plot."))
    before = path.read_bytes()
    assert PLOT_MARK.encode() in before  # the words are in the file...
    with pytest.raises(FileExistsError) as refused:  # ...and it is still not fastload's
        check_replaceable(path)
    assert str(refused.value) == (
        f"{path} exists and is not a plot fastload wrote: it is left as it is; give the plot "
        "a new name"
    )
    with pytest.raises(FileExistsError):  # nor is it written over by a plot
        plot_workers({(0, 2): 1.0, (1, 2): 2.0}, path)
    assert path.read_bytes() == before


@pytest.mark.parametrize("extension", sorted(OTHER_KEYS))
def test_a_plot_fastload_wrote_is_replaced_by_the_next(tmp_path, extension):
    path = tmp_path / f"workers.{extension}"
    plot_workers({(0, 2): 1.0, (1, 2): 2.0}, path)
    check_replaceable(path)
    plot_workers({(0, 2): 3.0, (1, 2): 1.0}, path)
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary left


def test_a_file_of_no_format_that_keeps_the_mark_is_never_replaced(tmp_path):
    notes = tmp_path / "notes.svg"
    notes.write_text(f"<svg><!-- {PLOT_MARK} --><text>{PLOT_MARK}</text></svg>")
    with pytest.raises(FileExistsError, match="is not a plot fastload wrote"):
        check_replaceable(notes)
    not_xml = tmp_path / "plot.svg"
    not_xml.write_bytes(b"\x00\x01" + PLOT_MARK.encode())
    with pytest.raises(FileExistsError, match="is not a plot fastload wrote"):
        check_replaceable(not_xml)


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_a_plot_gets_the_permissions_of_a_new_file(tmp_path, umask):
    path = tmp_path / "workers.png"
    before = os.umask(umask)
    try:
        plot_workers({(0, 2): 1.0, (1, 2): 2.0}, path)
        first = oct(path.stat().st_mode & 0o777)
        plot_workers({(0, 2): 2.0, (1, 2): 1.0}, path)  # replacing it too
    finally:
        os.umask(before)
    assert first == oct(path.stat().st_mode & 0o777) == oct(0o666 & ~umask)
