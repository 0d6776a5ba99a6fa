"""EXIF orientation: an image as stored, shown as its orientation (1 to 8) says. nvJPEG
ignores the tag (OpenCV and nvImageCodec apply it): :func:`orient` turns its image with
torch, and :func:`shown_steps` does it without a copy, for a kernel that reads pixels
through an address and two steps."""

from __future__ import annotations

import numpy as np
from torch import Tensor

__all__ = ["orient", "shown_steps"]

# Per orientation 1 to 8, the stored pixel (row, column) that shows at (y, x), as
# row = a_row * (height - 1) + row_y * y + row_x * x and
# column = a_column * (width - 1) + column_y * y + column_x * x, stored sizes: columns
# a_row, row_y, row_x, a_column, column_y, column_x. Row 0 stands for any other value.
_STORED = np.array(
    [
        [0, 1, 0, 0, 0, 1],  # (not a tag: as 1)
        [0, 1, 0, 0, 0, 1],  # 1: as stored
        [0, 1, 0, 1, 0, -1],  # 2: mirrored left to right
        [1, -1, 0, 1, 0, -1],  # 3: turned 180 degrees
        [1, -1, 0, 0, 0, 1],  # 4: mirrored top to bottom
        [0, 0, 1, 0, 1, 0],  # 5: transposed
        [1, 0, -1, 0, 1, 0],  # 6: transposed, then mirrored left to right
        [1, 0, -1, 1, -1, 0],  # 7: transposed, then turned 180 degrees
        [0, 0, 1, 1, -1, 0],  # 8: transposed, then mirrored top to bottom
    ],
    dtype=np.int64,
)


def orient(image: Tensor, orientation: int) -> Tensor:
    """A CHW image as stored, shown as its EXIF ``orientation`` (1 to 8) says."""
    if orientation >= 5:  # 5 to 8: transposed first, then as 1 to 4
        image = image.transpose(-2, -1)
        orientation = {5: 1, 6: 2, 7: 3, 8: 4}[orientation]
    dims = {2: (-1,), 3: (-2, -1), 4: (-2,)}.get(orientation)
    return image if dims is None else image.flip(dims)


def shown_steps(
    orientations: np.ndarray,
    heights: np.ndarray,
    widths: np.ndarray,
    steps_y: np.ndarray,
    steps_x: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Images as stored (sizes, and steps between rows and between columns, in elements),
    shown as their ``orientations`` say, without a copy: for each, the offset of the shown
    image's first pixel from the stored one's, the shown sizes and steps (a step may be
    negative). Pixel (y, x) shown is at ``offset + y * step_y + x * step_x``.

    Example:
        >>> one = np.array([1])
        >>> shown_steps(np.array([6]), 2 * one, 3 * one, 3 * one, one)  # a 2x3 image
        (array([3]), array([3]), array([2]), array([1]), array([-3]))
    """
    ways = _STORED[np.where((orientations >= 1) & (orientations <= 8), orientations, 0)]
    a_row, row_y, row_x, a_column, column_y, column_x = ways.T
    offsets = a_row * (heights - 1) * steps_y + a_column * (widths - 1) * steps_x
    shown_y = row_y * steps_y + column_y * steps_x
    shown_x = row_x * steps_y + column_x * steps_x
    transposed = row_x != 0
    shown_h = np.where(transposed, widths, heights)
    shown_w = np.where(transposed, heights, widths)
    return offsets, shown_h, shown_w, shown_y, shown_x
