"""The tensor kernels of :mod:`fastload.gpu`, apart from the modules (as torchvision's
``transforms.v2.functional``): each takes the batch and per-sample parameters as tensors
of shape (N, ...) and draws nothing. The modules draw the parameters, then call these.

- :mod:`~fastload.gpu.functional.geometry`: affine, perspective and elastic warps, and
  the fill-aware grid sampling they share;
- :mod:`~fastload.gpu.functional.crop`: crops, pads, resizes, masks resampled nearest;
- :mod:`~fastload.gpu.functional.color`: luma, HSV, brightness, contrast, saturation, hue;
- :mod:`~fastload.gpu.functional.pixel`: invert, posterize, solarize, sharpness,
  autocontrast, equalize, noise, erasing;
- :mod:`~fastload.gpu.functional.filters`: Gaussian blur;
- :mod:`~fastload.gpu.functional.mix`: MixUp and CutMix;
- normalisation on the device and on the CPU (from :mod:`fastload.finishing`, its owner);
- :mod:`~fastload.gpu.functional.dtype`: the working precision.
"""

from fastload.finishing import normalize, normalize_coefficients, normalize_into
from fastload.gpu.functional.color import (
    adjust_brightness,
    adjust_contrast,
    adjust_hue,
    adjust_saturation,
    blend,
    grayscale,
    hsv_to_rgb,
    rgb_to_hsv,
)
from fastload.gpu.functional.crop import (
    PADDING_MODES,
    box_mask,
    center_crop,
    crop_windows,
    gather_masks,
    nearest_indices,
    pad,
    resize,
    resized_crops,
)
from fastload.gpu.functional.dtype import max_value, restore, to_float
from fastload.gpu.functional.filters import gaussian_blur, gaussian_kernels
from fastload.gpu.functional.geometry import (
    Fill,
    affine,
    affine_grid,
    elastic,
    inverse_affine_matrices,
    perspective,
    perspective_coefficients,
    sample_grid,
)
from fastload.gpu.functional.mix import cutmix, mixup
from fastload.gpu.functional.pixel import (
    add_noise,
    adjust_sharpness,
    autocontrast,
    equalize,
    erase,
    invert,
    posterize,
    solarize,
)

__all__ = [
    "PADDING_MODES",
    "Fill",
    "add_noise",
    "adjust_brightness",
    "adjust_contrast",
    "adjust_hue",
    "adjust_saturation",
    "adjust_sharpness",
    "affine",
    "affine_grid",
    "autocontrast",
    "blend",
    "box_mask",
    "center_crop",
    "crop_windows",
    "cutmix",
    "elastic",
    "equalize",
    "erase",
    "gather_masks",
    "gaussian_blur",
    "gaussian_kernels",
    "grayscale",
    "hsv_to_rgb",
    "inverse_affine_matrices",
    "invert",
    "max_value",
    "mixup",
    "nearest_indices",
    "normalize",
    "normalize_coefficients",
    "normalize_into",
    "pad",
    "perspective",
    "perspective_coefficients",
    "posterize",
    "resize",
    "resized_crops",
    "restore",
    "rgb_to_hsv",
    "sample_grid",
    "solarize",
    "to_float",
]
