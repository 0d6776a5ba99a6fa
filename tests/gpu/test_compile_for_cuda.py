"""Every Triton kernel of the package compiles for the GPUs people train on, ahead of time,
on this CPU-only machine: sm_90 (H100, H200) and sm_80 (A100). A kernel that the
interpreter runs but that would not compile for a GPU fails here, not in the first
minutes of a lent GPU.

Each launch the package makes is recorded (the kernel stood in for by a recorder), then
bound and specialised by Triton's own launch code (the same types, constants, ``== 1``
specialisations and alignment attributes as a launch on a GPU) and compiled to a cubin
with Triton's bundled ``ptxas``.

What this cannot check without a device: ``torch.compile`` of ``fastload.gpu`` modules
(the GPU suite compiles the timm recipe), whose Inductor back end reads the device's
properties before it generates a kernel. The package itself compiles nothing else.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

triton = pytest.importorskip("triton", reason="needs Triton (with torch's Linux wheels)")

from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource, make_backend  # noqa: E402
from triton.runtime.jit import JITFunction, create_function_from_signature  # noqa: E402

import fastload  # noqa: E402
from fastload.decode import resample_triton  # noqa: E402
from fastload.finishing import Finish  # noqa: E402

HOPPER, AMPERE = GPUTarget("cuda", 90, 32), GPUTarget("cuda", 80, 32)
FLOATS = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
Launch = tuple[tuple[Any, ...], dict[str, Any]]


def package_kernels() -> dict[str, JITFunction]:
    """Every ``@triton.jit`` function of the package that is launched (a helper that only
    other kernels call, named with a leading underscore, is compiled inside them)."""
    found = {}
    root = Path(fastload.__file__).parent
    for module in pkgutil.walk_packages([str(root)], prefix="fastload."):
        path = root.joinpath(*module.name.split(".")[1:])
        source = path / "__init__.py" if module.ispkg else path.with_suffix(".py")
        if "triton.jit" not in source.read_text():
            continue
        for name, value in vars(importlib.import_module(module.name)).items():
            if isinstance(value, JITFunction) and not name.startswith("_"):
                found[f"{module.name}.{name}"] = value
    return found


class Recorder:
    """Stands in for a kernel: ``kernel[grid](*args, **kwargs)`` is recorded, not run."""

    def __init__(self) -> None:
        self.launches: list[Launch] = []

    def __getitem__(self, grid: object) -> Callable[..., None]:
        return lambda *args, **kwargs: self.launches.append((args, kwargs))


def crop_resize_finish_launches(monkeypatch: pytest.MonkeyPatch) -> list[Launch]:
    """Every combination the decoder can launch: images HWC (nvImageCodec) or CHW (nvJPEG);
    uint8 out (no dtype given), or each floating dtype in either layout; a 224x224 batch
    of two sizes."""
    recorder = Recorder()
    monkeypatch.setattr(resample_triton, "crop_resize_finish_kernel", recorder)
    finishes = [Finish()] + [
        Finish.normalized((0.485, 0.456, 0.406), (0.229, 0.224, 0.225), dtype, channels_last)
        for dtype in FLOATS
        for channels_last in (False, True)
    ]
    boxes = torch.tensor([[10.0, 20.0, 300.0, 350.0], [0.0, 0.0, 500.0, 375.0]])
    flip = torch.tensor([True, False])
    for hwc in (False, True):
        shapes = [(375, 500, 3), (500, 375, 3)] if hwc else [(3, 375, 500), (3, 500, 375)]
        images = [torch.zeros(shape, dtype=torch.uint8) for shape in shapes]
        for finish in finishes:
            resample_triton.crop_resize_finish(images, boxes, (224, 224), flip, finish, hwc=hwc)
    return recorder.launches


LAUNCHES: dict[str, Callable[[pytest.MonkeyPatch], list[Launch]]] = {
    "fastload.decode.resample_triton.crop_resize_finish_kernel": (crop_resize_finish_launches),
}


def compile_launch(kernel: JITFunction, launch: Launch, target: GPUTarget) -> bytes:
    """The cubin of ``launch``, bound and specialised as Triton's launcher does."""
    args, kwargs = launch
    backend = make_backend(target)
    binder = create_function_from_signature(kernel.signature, kernel.params, backend)
    bound, specialization, options = binder(*args, **kwargs)
    options, signature, constexprs, attrs = kernel._pack_args(
        backend, options, bound, specialization, options
    )
    source = ASTSource(kernel, signature, constexprs, attrs)
    compiled = triton.compile(source, target=target, options=options.__dict__)
    return compiled.asm["cubin"]


def compile_every_launch(target: GPUTarget, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    kernels = package_kernels()
    assert set(kernels) == set(LAUNCHES), "a Triton kernel without its launches in LAUNCHES"
    compiled = {}
    for name, kernel in kernels.items():
        launches = LAUNCHES[name](monkeypatch)
        assert launches, f"{name}: the package made no launch to compile"
        for index, launch in enumerate(launches):
            cubin = compile_launch(kernel, launch, target)
            assert cubin, f"{name}, launch {index}: no cubin for sm_{target.arch}"
        compiled[name] = len(launches)
    return compiled


@pytest.fixture(autouse=True)
def fresh_triton_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Compiled for real every time, never read back from ~/.triton."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))


@pytest.mark.parametrize("target", [HOPPER, AMPERE], ids=["sm_90", "sm_80"])
def test_every_kernel_compiles_in_every_launched_combination(target, monkeypatch):
    compiled = compile_every_launch(target, monkeypatch)
    assert compiled == {next(iter(LAUNCHES)): 18}  # CHW and HWC x (uint8 + 4 dtypes x 2)


def test_the_recorded_launches_are_the_typed_ones_a_gpu_would_see(monkeypatch):
    launches = crop_resize_finish_launches(monkeypatch)
    outputs = [args[4] for args, _ in launches]
    assert [out.dtype for out in outputs] == [torch.uint8, *[d for d in FLOATS for _ in (0, 1)]] * 2
    assert {out.shape for out in outputs} == {(2, 3, 224, 224)}
    # each image's strides (channel, row, column) in the table: CHW planes, then HWC pixels
    strides = [args[0][:, 3:6].tolist() for args, _ in launches]
    chw = [[375 * 500, 500, 1], [500 * 375, 375, 1]]
    hwc = [[1, 500 * 3, 3], [1, 375 * 3, 3]]
    assert strides == [chw] * 9 + [hwc] * 9
    channels_last = [out.is_contiguous(memory_format=torch.channels_last) for out in outputs]
    assert channels_last == [False, *[False, True] * 4] * 2
