"""How encoded images become tensors: every decoder of the package, in one place.

- :mod:`~fastload.decode.opencv`: the CPU decode (OpenCV, reduced-size JPEG decode,
  EXIF orientation, size limits), for the datasets and the CPU transforms;
- :mod:`~fastload.decode.gpu`: :class:`GPUDecoder`, a batch of encoded images to a
  finished batch on the device (decode, crop, resize, flip, normalise, cast, layout);
- :mod:`~fastload.decode.nvimgcodec`: NVIDIA nvImageCodec, the hardware JPEG decoder;
- :mod:`~fastload.decode.crop`: crop + resize + flip + finish of decoded images of any
  sizes, on the fused Triton kernel (:mod:`~fastload.decode.resample_triton`) or its
  plain-torch reference (:mod:`~fastload.decode.resample`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastload._lazy import lazy_exports

_EXPORTS = {"GPUDecoder": "fastload.decode.gpu"}
__all__ = ["GPUDecoder"]

if TYPE_CHECKING:
    from fastload.decode.gpu import GPUDecoder

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals(), __all__)
