"""The public surface: removing or adding a name here is a visible decision."""

from __future__ import annotations

import subprocess
import sys

import pytest
from torch.utils.data import DataLoader

import fastload

PUBLIC_NAMES = {
    "DataPrefetcher",
    "FastLoader",
    "ImageFolder",
    "LMDBDataset",
    "__version__",
    "auto_num_workers",
    "diagnose",
    "make_image_folder",
    "timed",
    "write_lmdb",
}


def test_all_lists_exactly_the_public_names():
    assert set(fastload.__all__) == PUBLIC_NAMES


@pytest.mark.parametrize("name", sorted(PUBLIC_NAMES))
def test_every_public_name_resolves(name):
    assert getattr(fastload, name) is not None


def test_the_packages_the_docs_name_are_there_after_import_fastload():
    script = (
        "import fastload\n"
        "print(fastload.gpu.RandomHorizontalFlip.__name__, fastload.transforms.__name__,"
        " fastload.datasets.__name__, fastload.decode.__name__)"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.stdout.split() == [
        "RandomHorizontalFlip",
        "fastload.transforms",
        "fastload.datasets",
        "fastload.decode",
    ]


def test_unknown_name_raises_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'NoSuchThing'"):
        fastload.NoSuchThing  # noqa: B018


def test_fastloader_is_a_dataloader():
    assert issubclass(fastload.FastLoader, DataLoader)


def test_import_does_not_load_torch_or_opencv():
    code = "import sys, fastload; print('torch' in sys.modules, 'cv2' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


GPU_NAMES = {
    "sample_seeds",
    "BatchTransform",
    "CenterCrop",
    "ColorJitter",
    "CutMix",
    "GaussianBlur",
    "MixUp",
    "Normalize",
    "RandomCrop",
    "RandomErasing",
    "RandomGrayscale",
    "RandomHorizontalFlip",
    "RandomResizedCrop",
    "BatchRandomResizedCrop",  # RandomResizedCrop's name that says it crops a batch
    "RandomVerticalFlip",
    "Resize",
    "ToDtype",
    # the policies and what they are made of
    "AugMix",
    "AutoAugment",
    "AutoAugmentPolicy",
    "ElasticTransform",
    "GaussianNoise",
    "RandAugment",
    "RandomAdjustSharpness",
    "RandomAffine",
    "RandomAutocontrast",
    "RandomEqualize",
    "RandomInvert",
    "RandomPerspective",
    "RandomPosterize",
    "RandomRotation",
    "RandomSolarize",
    "TrivialAugmentWide",
    "SanitizeBoundingBoxes",
}


def test_decode_names():
    from fastload import decode

    assert decode.__all__ == ["GPUDecoder"]
    assert decode.GPUDecoder.__module__ == "fastload.decode.gpu"


def test_gpu_module_names():
    from fastload import gpu

    assert set(gpu.__all__) == GPU_NAMES
    # AutoAugmentPolicy is torchvision's enum; SanitizeBoundingBoxes works on the targets
    # alone; sample_seeds is a context manager for the modules' draws
    modules = GPU_NAMES - {
        "AutoAugmentPolicy",
        "SanitizeBoundingBoxes",
        "sample_seeds",
    }
    assert all(issubclass(getattr(gpu, name), gpu.BatchTransform) for name in modules)


def test_diagnose_stays_the_function_after_its_module_is_imported():
    import fastload.tools.diagnostics

    assert fastload.diagnose is fastload.tools.diagnostics.diagnose and callable(fastload.diagnose)


def test_the_lmdb_errors_users_catch_are_exported():
    from fastload import lmdb

    assert set(lmdb.__all__) == {
        "LMDBDataset", "RecordFormatError", "TargetError", "WorkerDiedError", "write_lmdb",
    }  # fmt: skip
    assert issubclass(lmdb.TargetError, ValueError)
    assert issubclass(lmdb.WorkerDiedError, OSError)


@pytest.mark.parametrize("name", ["s3server", "shapes"])
def test_the_test_helpers_live_in_fastload_testing_alone(name):
    import importlib

    assert importlib.import_module(f"fastload.testing.{name}").__all__
    with pytest.raises(ModuleNotFoundError, match=rf"fastload\.tools\.{name}"):
        importlib.import_module(f"fastload.tools.{name}")
