"""Write the documentation's benchmarks page, docs/benchmarks.md, from the results: one
section per JSON file under benchmarks/results/, whose folders name the machine that
measured it (cpu/: no GPU; gpu/: the GPU suite and check), each with the machine it ran
on, its settings, its table, its plot and its notes; the test runs' sections come after
the benchmarks'. Every figure on the page is one that a script here measured; a test checks
that the page matches the committed results, and `make docs` runs this first.

The page opens with a headline table (``HEADLINES``), the one source of the figures that
README.md and docs/index.md open their "Measured" part with: this rewrites their copy,
between the ``HEADLINE_START`` and ``HEADLINE_END`` lines, with the page.

The page links to the plots where they are (../benchmarks/results/...), so it reads the
same on GitHub; the site build copies them in (mkdocs_hooks.py). Standard library only:
it runs where the GPU suite runs, without the docs' packages.

Usage:
    python benchmarks/docs_page.py [--results benchmarks/results] [--page docs/benchmarks.md]
    python benchmarks/docs_page.py --check   # exit status 1 if a page is out of date
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
PAGE = ROOT / "docs" / "benchmarks.md"


@dataclass(frozen=True)
class Notes:
    """What a result file measured (``about``) and what its run showed (``findings``),
    in Markdown; links are relative to docs/. A figure the findings quote is read from
    the result file's rows, never written here (:func:`quoted`): ``[[speedup ROW]]``,
    ``[[cpu ROW]]`` (CPU ms per item), ``[[over ROW | OTHER]]`` (ROW's throughput over
    OTHER's), ``[[cpu share ROW | OTHER]]`` (ROW's CPU per item as a share of OTHER's)
    and ``[[cpu above ROW | OTHER]]`` (ms per item more than OTHER's)."""

    title: str
    about: str = ""
    findings: str = ""


#: The GPU suite's parts: (part, script, what it is compared with in the same run).
SUITE_PARTS = [
    ("tests", "cuda_tests.py", "the whole test suite with CUDA visible: pass/fail/skip "
     "counts, every failure by name"),
    ("prefetch", "prefetch.py", "ResNet-50 step (bf16, channels_last, batch 256, 224 px) fed "
     "by the usual loop, apex's `data_prefetcher`, timm's `PrefetchLoader`, `DataPrefetcher` "
     "at depth 1/2/3; the step alone; a loader slower than the step"),
    ("augment", "gpu_augment.py", "384² uint8 to 224² float, the seed recipe and a timm one "
     "(+ RandomErasing, MixUp/CutMix): torchvision per sample on every CPU core, torchvision "
     "v2 on the batch, torchvision per sample in a loop on the GPU, Kornia, `fastload.gpu` "
     "with and without `torch.compile`"),
    ("detection", "detection_augment.py", "boxes, labels and instance masks: `fastload.gpu` "
     "on the batch against torchvision v2 per sample"),
    ("decode", "gpu_decode.py", "`GPUDecoder` vs `torchvision.io.decode_jpeg(device=\"cuda\")` "
     "vs OpenCV on every core, on 500x375 crops of real photographs; whether the JPEG engines "
     "were used"),
    ("memory", "gpu_memory.py", "reserved CUDA memory after each epoch through "
     "`DataPrefetcher` and `GPUDecoder`, each in its own process; the growth after the "
     "allocator's warm-up"),
    ("end_to_end", "end_to_end.py", "ResNet-50 training from JPEGs (folder and LMDB; CPU or "
     "GPU decoding) vs torchvision `ImageFolder` + `DataLoader` with a worker per core"),
    ("end_to_end_r18", "end_to_end.py", "the same with ResNet-18, the GPU-starved case"),
]  # fmt: skip
SUITE_TABLE = "\n".join(
    ["| part | script | compared, in the same run, with |", "|---|---|---|"]
    + [f"| `{part}` | `{script}` | {compared} |" for part, script, compared in SUITE_PARTS]
)
SUITE_COMMANDS = """\
make bench-gpu                                  # all parts, one after the other
make bench-gpu PARTS=tests,prefetch BUDGET=540  # or in pieces that fit a 10-minute slot
python benchmarks/gpu_suite.py --smoke          # every part at tiny sizes, ~1 min on a CPU
python benchmarks/docs_page.py                  # this page, from the JSON\
"""

#: `make gpu-check`'s plan (gpu_check.py): (part, budget, what it measures).
CHECK_PARTS = [
    ("end_to_end_r18", "185 s", "ResNet-18 (bf16, channels_last, batch 256) from 7,680 "
     "photos in 30-step epochs: GPU decode, CPU decode, torchvision `ImageFolder` + "
     "`DataLoader`, DALI when installed, the step alone; GPU idle from CUDA events, the "
     "steady rate and each epoch's fill apart, CPU per thread (native threads too), the "
     "JPEG engines' use over "
     "each round; GPU decode also with a "
     "quarter of the JPEGs decoded by OpenCV beside it (`cpu_share=0.25`); 3 rounds, each "
     "variant's process kept for all of them"),
    ("end_to_end_r50", "140 s", "the same with ResNet-50, 2 rounds"),
    ("decode", "45 s", "`GPUDecoder` per backend vs torchvision's nvJPEG call, decode only "
     "and to a finished bf16 channels_last batch; DALI when installed"),
    ("memory", "40 s", "reserved CUDA memory over 20 epochs, each pipeline in its own "
     "process; the growth after a 3-epoch warm-up"),
    ("small_batches", "60 s", "an SRCNN training step on 96 px patches at batch sizes 8 and "
     "64: `DataLoader`, `FastLoader`, `FastLoader` + `DataPrefetcher`, the step alone"),
    ("cuda_new", "45 s", "the CUDA tests of the paths that had never run on a GPU: "
     "`GPUDecoder`'s `cpu_share` and its one copy from pinned memory (the decoder's tests), "
     "the fused kernel reading each image through its table of addresses and strides"),
    ("timm_loader", "what is left", "timm's `create_loader` (its `PrefetchLoader`) vs "
     "fastload's on the GPU: `train.py`'s recipe at 224 px with its training step "
     "(ResNet-18), and the step alone; 5 rounds"),
    ("cuda_rest", "what is left", "the other CUDA tests"),
]  # fmt: skip
CHECK_TABLE = "\n".join(
    ["| part | budget | measures |", "|---|---|---|"]
    + [f"| `{part}` | {budget} | {what} |" for part, budget, what in CHECK_PARTS]
)


#: --store -> its server as the link sections name it, and what its run leaves out.
LINK_STORES = {
    "s3": ("The S3 run", "Swift", "every peer installed (`bash benchmarks/install_peers.sh`)"),
    "gs": ("The Google Cloud Storage run (`--store gs`)",
           "fake-gcs-server and its upload-translating proxy",
           "the raw GETs through obstore, in this process; the peers run against S3 only"),
    "az": ("The Azure Blob Storage run (`--store az`)", "Azurite",
           "the raw GETs through obstore, in this process; the peers run against S3 only"),
}  # fmt: skip


def link_method(rate: str, delay_ms: int, store: str = "s3") -> str:
    """How a run of object_storage.py across a shaped link was made (its findings differ)."""
    run, server, peers = LINK_STORES[store]
    return f"""\
{run} (`benchmarks/object_storage.py`, a run per link by default) with the
server behind a link with a cloud's latency and bandwidth: {server} in a network namespace
of the benchmark's own, reached over a veth pair, each way limited to {rate} and each
receiving side delaying what it gets by {delay_ms} ms (`benchmarks/lib/shaped_link.py`,
`benchmarks/lib/delay_queue.py`). 8,000 generated 500x375 JPEGs (about 420 MB) in 52
shards of 8 MB (more than 5 times the download-ahead depth), 5 interleaved rounds after a
warm-up, medians; the raw GETs at 8, 16 and 32 at once, the fastest the baseline (the
summary gives each one's MB/s and share of the link); fastload cold at its default depth,
which follows the link (from 8 shards ahead; the depth it reached is in the summary), and
at fixed depths of 8 and 16; the warm and local-disk passes read 5 epochs each
(`WARM_EPOCHS`); {peers}. The server's and the delay programs' CPU per sample are columns
of their own where the run has them (the other CPU column counts them too)."""


def link_findings(server: str) -> str:
    """What a GCS or Azure run across a link found: the cold pass against the raw GETs,
    warm, faults (their peers are in the S3 sections)."""
    return f"""\
fastload cold reads at [[speedup fastload, cold cache]] the best raw GETs at its default
depth, [[speedup fastload, cold cache, download_ahead=8]] at a fixed 8 shards ahead and
[[speedup fastload, cold cache, download_ahead=16]] at 16. Warm, fastload reads at
[[speedup fastload, warm cache]] of local disk. With faults injected the epoch is exact, and
its time over the clean pass's through the same proxy is
[[over fastload, cold cache, via the proxy | fastload, cold cache, via the proxy, faults injected]].
The 20 cold runs are in the summary. The peers read from S3 only: the S3 sections compare
them on the same links ({server} is read through obstore, fastload's client for it)."""


#: Result file (its path under results/, no suffix) -> notes, in the page's order. A file
#: not listed here still gets its section, after these, with its table and no prose.
NOTES: dict[str, Notes] = {
    "gpu/check": Notes(
        "The short GPU check (`make gpu-check`)",
        f"""\
`benchmarks/gpu_check.py` runs, in one command of at most 540 s, the parts in this
order, each within its own budget; a part cut short keeps what it measured and says so.
The [contributing page](contributing.md#measuring-on-a-gpu-make-gpu-check) says how to
run it on a GPU machine.

{CHECK_TABLE}""",
    ),
    "gpu/cuda_tests_new": Notes(
        "CUDA tests of the paths new to a GPU",
        "The `needs_cuda` tests of `cuda_tests.NEW_ON_CUDA`, before the other CUDA tests in "
        "`make gpu-check`.",
    ),
    "gpu/cuda_tests_rest": Notes(
        "Other CUDA tests", "The `needs_cuda` tests of every other file, last in the check."
    ),
    "gpu/suite": Notes(
        "The GPU suite: `make bench-gpu`",
        f"""\
`benchmarks/gpu_suite.py` measures every GPU claim of these docs in one command, each
part in its own process (a crash or a time-out in one loses nothing else), and writes
JSON (device, driver, CUDA, torch and torchvision versions, CPU count, settings, every
timing) and a PNG per part to `benchmarks/results/gpu/`:

{SUITE_TABLE}

```bash
{SUITE_COMMANDS}
```

Where Python already has torch and torchvision (a GPU machine's image), the suite runs
from `src/` with no install: `benchmarks/gpu_wheels.sh` fetches the wheels such an image
may lack (lmdb, albumentations, Kornia) into `.whl`, and its header gives the `pip
install --target` line; the parts need timm and scikit-image too, and report a peer
that is missing instead of failing. The smoke run is part of the test suite
(`tests/benchmarks/test_gpu_suite.py`), so the suite cannot rot between GPU runs.""",
    ),
    "gpu/cuda_tests": Notes(
        "CUDA tests", "The whole pytest suite with CUDA visible (the `needs_cuda` tests included)."
    ),
    "gpu/prefetch": Notes(
        "Prefetch overlap",
        "A ResNet-50 step (bf16 autocast, channels_last, SGD, batch 256, 224 px) fed from a "
        "uint8 loader; data wait is the share of the loop in which the GPU ran no step. "
        "Goal: under 2 % when the loader keeps up, never behind apex or timm.",
    ),
    "gpu/gpu_augment": Notes(
        "GPU augmentation",
        "256 uint8 images of 384x384 to float 224x224 through the recipes in the table "
        "(seed and timm; policy, with TrivialAugmentWide, from the runs after it was added). "
        "Goal: at least 20x the per-sample CPU recipe in one worker per core, ahead of Kornia.",
    ),
    "gpu/detection_augment": Notes(
        "Detection augmentation",
        "64 uint8 images of 384x384 with 1 to 8 boxes, labels and instance masks each, "
        "through RandomResizedCrop 320, flip and SanitizeBoundingBoxes: fastload.gpu on the "
        "batch against torchvision v2 per sample in one worker per core.",
    ),
    "gpu/gpu_decode": Notes(
        "GPU JPEG decoding",
        "500x375 crops of real photographs, quality 90, batches of 256. Goals: the finished "
        "decode (crop, flip, normalise to bf16 NHWC) at 20,000 images/s or more on an H100 or "
        "H200 at 0.1 CPU ms per image or less; the nvimgcodec rows within 80 % of "
        "nvImageCodec's own batched call (its row, where the run has it). \"CPU ms/image by "
        "thread\": the three threads that used the most, Python's by name, pools together, "
        "the others (OpenMP's, CUDA's, nvJPEG's) by the system's, marked (native).",
    ),
    "gpu/end_to_end": Notes(
        "End to end, ResNet-50", "Goal: ahead of DALI, the GPU idle under 2 %."
    ),
    "gpu/end_to_end_resnet18": Notes(
        "End to end, ResNet-18",
        "The GPU-starved case. Goal: at least 90 % of the step alone, ahead of DALI.",
    ),
    "gpu/end_to_end_resnet18_round2": Notes(
        "End to end, ResNet-18, a second round",
        "The same variants once more, in a call of their own on the same machine right after "
        "`make gpu-check` (whose ResNet-18 part had time for one round).",
    ),
    "gpu/gpu_memory": Notes(
        "Memory over epochs",
        "Reserved CUDA memory after each epoch. Goal: flat after the caching allocator's "
        "warm-up (its pools filled by the first epochs' random sizes).",
    ),
    "gpu/small_batches": Notes(
        "Small batches, a training step",
        "`benchmarks/small_batches.py --step srcnn`: an SRCNN step (9-5-5, restoring each "
        "96 px image from its 2x-downscaled copy) on every batch of the 2,000 generated "
        "JPEGs, at batch sizes 8 and 64, one worker per core: `DataLoader` and `FastLoader` "
        "with the move and conversion a training script does, `FastLoader` + "
        "`DataPrefetcher`, and the step alone on one batch already on the GPU. Goal: at "
        "batch 8, fastload near the step alone at batch 8.",
    ),
    "gpu/timm_loader": Notes(
        "timm's create_loader vs fastload's, on the GPU",
        "`benchmarks/timm_loader.py --device cuda` in `make gpu-check`: timm's `train.py` "
        "recipe (RandAugment `rand-m9-mstd0.5`, and with `inc1`; pixel erasing 0.25; "
        "`FastCollateMixup`) at 224 px, batch 64, one worker per core, generated photos, "
        "interleaved rounds after a warm-up (the settings in the JSON). timm's loader mixes "
        "in its workers and its `PrefetchLoader` normalises and erases on the GPU; "
        "fastload's workers decode and crop, and the policy, mixing, normalising and "
        "erasing run on the GPU batch. An epoch ends when the GPU has made its last batch. "
        "With `--model` (`resnet18` in `make gpu-check` from 2026-11-28 on) each batch "
        "also trains the model, as `train.py` does, and a row gives the step alone; a run "
        "without that row is the loader alone.",
    ),
    "cpu/end_to_end": Notes(
        "End to end on the CPU",
        """\
`benchmarks/train_harness.py` trains a torchvision ResNet on an image folder or an
LMDB file, with fastload's pipeline or, with `--baseline`, the plain torchvision one
(ImageFolder, PIL transforms with ToTensor and Normalize, DataLoader with persistent
workers, `.to(device)`). `benchmarks/end_to_end.py` runs it on the 1000 generated JPEGs:
RandomResizedCrop 160, flip, ColorJitter(0.2, 0.2, 0.2), batch 64, files to a
normalised batch on the device (the input pipeline alone: `--model none`), median of 3
epochs after a warm-up epoch, each variant in its own process.""",
        """\
On this 2-core CPU machine (no GPU) fastload's pipeline decodes with OpenCV, crops with
`fastload.transforms.RandomResizedCrop` and flips and jitters with albumentations in the
workers on uint8 (on a GPU machine the flip and jitter run per sample on the GPU); the
prefetcher normalises on the CPU. The work is equal: the crop is antialiased where it
shrinks, as torchvision's PIL resize is. fastload gets
[[speedup fastload, image folder, CPU decode]] (folder) and
[[speedup fastload, LMDB, CPU decode]] (LMDB) the images/s of the same torchvision
pipeline with the same 2 persistent workers, at
[[cpu share fastload, image folder, CPU decode | baseline: torchvision + DataLoader, 2 workers]]
of its CPU time per image, and
[[over fastload, image folder, CPU decode | baseline: torchvision + DataLoader, 0 workers]]
DataLoader with its defaults. The GPU
suite runs the same script with a ResNet-50 step, 20,000 JPEGs and GPU decoding
([`gpu: end_to_end`](#gpu-end_to_end)).""",
    ),
    "cpu/frameworks": Notes(
        "Inside Lightning and Accelerate",
        """\
`benchmarks/frameworks.py` trains the same small CNN (SGD, batches of 64 at 112 px) on
the 1000 photo-like JPEGs under each framework: its usual data path (torchvision
ImageFolder, v2 transforms per sample, DataLoader with 2 persistent workers) against
fastload's integration (FastLoader with OpenCV decode and the crop in 2 workers, a
DataPrefetcher that flips per sample and normalises, returned by `train_dataloader()` or
fed beside the prepared model), and fastload in a hand-written loop. Each variant in its
own process, 5 interleaved rounds of 3 epochs, the first a warm-up. Speed-ups are
against the framework's usual path (the headline table gives each one's spread over the
rounds); "of fastload's own loop" is the integration's
throughput as a share of the hand-written loop's. Goal: at least 0.95x of the own loop
under Lightning, ahead of the usual path in the same run.""",
    ),
    "cpu/peers": Notes(
        "Peers: files to a normalised batch on the CPU",
        """\
`benchmarks/peers.py` puts fastload beside the libraries built for this job, in one
run: 1000 photo-like 500x375 JPEGs to float32 batches of 64 at 224 px, every pipeline
doing RandomResizedCrop (antialiased where it shrinks), a random flip and ImageNet
normalisation with 2 worker processes or threads. The baseline is torchvision's classic
`ImageFolder` + PIL + `DataLoader` with persistent workers. Every variant runs in its
own process; 3 rounds are interleaved (each variant once, then again); the table gives
the median of 9 timed epochs (3 per process, after a warm-up epoch). CPU ms per image
counts the process, its threads and its worker processes. The peers: torchvision v2
(`decode_jpeg` + v2 transforms + DataLoader); torchdata.nodes (the same v2 function in 2
threads); NVIDIA DALI's CPU-only pipeline (`image_random_crop` decode, antialiased
`resize`, `crop_mirror_normalize`); FFCV (its own file, which its writer re-encodes at
JPEG quality 90 like the source files; its `RandomResizedCropRGBImageDecoder`, which
shrinks with `INTER_AREA`; flip; `NormalizeImage`). `bash benchmarks/install_peers.sh`
installs them into `.venv`; a peer that does not install is listed with the reason
instead of a figure.""",
        """\
- **fastload is ahead of FFCV and DALI here, in images/s and in CPU time per image**:
  from the folder, [[speedup fastload: image folder]] the baseline at
  [[cpu fastload: image folder]] CPU ms per image (FFCV [[speedup FFCV]] at
  [[cpu FFCV]], DALI [[speedup NVIDIA DALI: CPU pipeline]] at
  [[cpu NVIDIA DALI: CPU pipeline]], torchvision v2
  [[speedup torchvision v2: decode_jpeg + v2 transforms + DataLoader]] at
  [[cpu torchvision v2: decode_jpeg + v2 transforms + DataLoader]]); from LMDB,
  [[speedup fastload: LMDB]] at [[cpu fastload: LMDB]] ms. The lead over FFCV is small
  ([[over fastload: image folder | FFCV]] its images/s) and the machine is shared.
- **The path a GPU machine uses** (files to uint8 batches; the GPU normalises) costs
  [[cpu fastload for a GPU: uint8 batches, not normalised]] ms per image,
  [[cpu above fastload for a GPU: uint8 batches, not normalised |
  decode + crop alone: one process, no loader]]
  ms above decoding and cropping the same images in one process with no loader at all
  ([[cpu decode + crop alone: one process, no loader]] ms: OpenCV's decode most of it,
  then the crop, reading and collating the rest).
- **What made the difference** (each measured in the running pipeline, 64 images of 224
  px): the normalisation on the CPU, once the costliest step after the decode, became a
  small one. It had read uint8 straight into torch's multiply-add, which is not
  vectorised, and written a fresh 38.5 MB tensor each batch. Now one OpenCV pass per
  channel writes into a reused buffer, on one thread beside the worker processes. The
  crop went from OpenCV's `INTER_AREA` or v2's resize to torch's antialiased uint8
  resampling on a view, about half the time for a 300x300 crop. Batches are stacked
  straight into shared memory in the worker.
- **Tried, measured, not taken**: threads instead of worker processes
  ([[speedup fastload: image folder, torchdata.nodes threads for workers]] at
  [[cpu fastload: image folder, torchdata.nodes threads for workers]] ms: the GIL
  serialises the Python between the decodes); decoding at M/8 scale through simplejpeg
  (slower than a full decode at 7/8 and 6/8); simplejpeg instead of OpenCV (level per
  decode, not worth a dependency); glibc malloc told to keep its heap (no gain that
  could be separated from the noise).
- **Not reached: the goal of 2.3x the baseline, at most 1.8 ms per image.** On 2 cores that leaves
  little more than what the decode and crop cost with no loader at all. Decoding only
  the crop's region of the JPEG (see
  [`cpu/crop_decode`](#cpu-crop_decode)) is the way there.""",
    ),
    "cpu/peers_nvimgcodec": Notes(
        "Peers, with nvImageCodec installed",
        "`benchmarks/peers.py` again, on 500 images, with nvImageCodec installed and a "
        "crop-aware fastload variant (encoded bytes in, the crop decodes); peers that do "
        "not install here are listed with the reason.",
    ),
    "cpu/crop_decode": Notes(
        "Crop-aware decoding",
        """\
`benchmarks/crop_decode.py`: `fastload.transforms.RandomResizedCrop` given the encoded
JPEG (a dataset with `decode=None`) draws its box from the header and has libjpeg decode
at 1/2, 1/4 or 1/8 scale whenever the box, so reduced, still covers the output size, as
DALI's `image_random_crop` and FFCV's crop decoder do. Against decoding the whole image
first, and against torchvision v2 (`decode_jpeg` + `v2.RandomResizedCrop`) and DALI
(`image_random_crop` + antialiased `resize`, all images of a pass as one batch), one
thread each, on 200 of the generated 500x375 JPEGs and on 60 photo-like 2000x1500 ones
(heavily textured: about 18 ms to decode each); 5 interleaved rounds, medians.""",
        """\
On large photos it decodes [[speedup 2000x1500 to 224 px: crop-aware (encoded in)]] as
many images per second as decoding them whole, and
is ahead of DALI's region-of-interest decode here; on 500x375 photos it is level,
because a 224 px crop of them never allows 1/2 scale and a 160 px one seldom does. The
pixels differ from the full decode's by the DCT's own downscaling and a box rounded to
the reduced grid (1 to 3 levels on average, `tests/test_transforms.py`). Use it for
datasets of large photos.""",
    ),
    "cpu/host_path": Notes(
        "GPUDecoder's host path, its GPU calls stood in for",
        """\
`benchmarks/host_path.py`: the GIL-held CPU time of `GPUDecoder(224)`'s producer-side work
per batch of 256 photo-like 500x375 JPEGs (half with a camera's EXIF block), nvJPEG's
decode and nvImageCodec's `Decoder.decode` replaced by stand-ins that return preallocated
outputs at once, and the fused crop kernel's launch returning at once. The launch's host
side (its table of the images, two copies of its arguments, the output's allocation) is
counted, the same in every variant. "before" is a copy, kept in the script, of the
host steps before the header was read once per image (a whole-file copy and scan per
image, PIL for EXIF, two CodeStreams and a sub-stream); "after" is `GPUDecoder` itself
on an `EncodedBatch` whose headers the collate read in the worker ("list in": a list of
tensors, headers read on the producer). The budget (issue 48): 1 ms per batch.""",
        """\
The nvjpeg path is around the budget, not under it: 1.07 to 1.45 ms over four runs on a
machine shared with other work, the kernel's launch included; the header parse above,
unchanged code, moved from 1.11 to 1.64 ms over the same runs. What is left there: the
box draw (about 60 NumPy operations on 256 x 10 float64 values, 0.1 ms; torch's took
0.2 ms), the kernel's table (one pass over the images for their addresses, sizes and
strides, 0.2 ms), and the 256 tensor views torchvision's batched decode takes (0.1 ms).
The nvimgcodec path is not within it: what is left there is nvImageCodec 0.9's own Python
objects, a CodeStream per image and, for a crop, a Region and a sub-stream, then an
output object per image: most of its time per image. A list of tensors costs the header
parse on the producer; collate with `encoded_collate`.""",
    ),
    "cpu/tensor_dataset": Notes(
        "A TensorDataset in memory",
        """\
The setting of *Faster Data Loading in PyTorch*: 100 shuffled batches of 8192 rows x 128
float64 features from a `TensorDataset`; DataLoader as is, DataLoader with the fix users
know (a `BatchSampler` as its sampler and `batch_size=None`, so each batch is one
`dataset[list]`), FastLoader, and indexing a tensor by hand; rounds interleaved, medians
of 3 after a warm-up round.""",
        """\
FastLoader draws the same permutation as DataLoader as one tensor and gathers each batch
with `index_select`, so what is left is memory bandwidth: it is ahead of the
BatchSampler fix and of indexing a tensor by hand (`x[perm[i:i + n]]`). The ratios move
with the machine's load (this machine is shared).""",
    ),
    "cpu/small_batches": Notes(
        "Small batches",
        """\
`benchmarks/small_batches.py`: batch sizes 1, 4, 8, 16 and 64 over 2,000 generated
96x96 JPEGs in an image folder, their LMDB copy, and 2,000 uint8 samples of 3x32x32 in
memory (a `TensorDataset`). torchvision's way (`ImageFolder`, PIL, `PILToTensor`; the
same dataset for LMDB and memory) under `DataLoader`, against `FastLoader` (OpenCV
decode) and `FastLoader` + `DataPrefetcher` on the CPU (float32 out); 2 persistent
workers each, shuffled. A timed run is the whole epochs that hand out at least 120
batches and 8,000 images (4 epochs here); a source's variants take turns run by run after
a warm-up run each; medians.
CPU ms per image include the workers; "of batch-64 rate" is a variant's images/s over
its own at batch size 64 on the same source, the median of the rounds' ratios (each
round runs both within seconds: the shared machine's speed drifts more between rounds).
The summary holds the goals of the issue (batch 8 at 90 % of the batch-64 rate and 2.5x
DataLoader's; batch 1 in memory at 3x DataLoader's batches/s), measured as ratios paired
round by round.""",
    ),
    "cpu/hf_datasets": Notes(
        "Hugging Face datasets: the usual recipe vs from_hf",
        """\
300 generated 500x375 JPEGs as a `datasets` set saved to disk and loaded back (bytes
embedded, memory-mapped). HF's recipe: PIL decode in `with_transform`, torchvision v2
RandomResizedCrop 224 + flip + ToImage/ToDtype/Normalize, DataLoader with 2 workers,
batch 64. fastload: `from_hf(decode=None)` with `DecodeRandomResizedCrop(224)` + flip in
FastLoader's 2 workers (uint8 out), a `DataPrefetcher` on the CPU normalising: the same
float32 batches. And 50,000 numeric rows (`with_format("torch")`, batch 256, no
workers) through DataLoader, FastLoader and FastLoader(seed=0). Rounds interleaved,
medians of 3 after a warm-up; CPU ms per item include the workers.""",
        """\
The adapter reads each batch's bytes in one Arrow read and decodes with OpenCV, cropping
from the JPEG header; HF's recipe decodes every full image with PIL and crops the
result. On numeric rows every loader is bound by `datasets`' own batch formatting; the
seeded loader pays for seeding each batch.""",
    ),
    "cpu/timm_loader": Notes(
        "timm's create_loader vs fastload's, on the CPU",
        """\
512 generated 500x375 JPEGs, timm's own `train.py` recipe: RandAugment
`rand-m9-mstd0.5-inc1` (and, as timm cannot run `inc1`, `rand-m9-mstd0.5`), random erasing
0.25 in pixel mode, `FastCollateMixup` (mixup 0.8, cutmix 1.0, label smoothing 0.1), at
64 px batch 32 and 224 px batch 64, 2 workers, device "cpu". timm reads with
`create_dataset` (PIL); fastload with its `ImageFolder` (OpenCV, crop-aware decode). Each
fastload row is compared with timm's row of its size without `inc1`. Epochs interleaved,
medians after a warm-up epoch each; CPU ms per image include the workers. The summary
holds the per-op table: each operation of the recipe, timm's and fastload's, on the same
images in one thread, ms per batch.""",
        """\
With `inc1`, timm posterizes to 0 bits at high magnitudes, which Pillow refuses: its
rows fail in a worker (the reason is in the table). fastload's workers crop with a
reduced-size decode, then run the policy and the mixing (on uint8, where timm's
`FastCollateMixup` mixes) on each batch they make; the loop normalises and erases (noise
for the erased boxes alone) on one intra-op thread. On a CPU the policy applies each
operation to runs of samples that stay in the cache, its per-pixel operations through a
lookup table per sample, and mixing blends each pair of mirrored images in turn. The
per-op table says where the rest goes: the crop costs less than Pillow's, the batch
RandAugment still more than Pillow's per-image operations (its warps sample a float grid,
as torchvision's do). On a GPU these stages run on the device; not measured there yet.""",
    ),
    "cpu/loader_defaults": Notes(
        "Each loader with its own defaults",
        "1000 generated 500x375 JPEGs, torchvision `ImageFolder`, RandomResizedCrop 224 + "
        "flip + uint8 tensor, batch 64; each loader with its own defaults; epochs "
        "interleaved, medians of 5 after a warm-up epoch each.",
    ),
    "cpu/lmdb_vs_files": Notes(
        "LMDB against a folder of files",
        "The 1000 generated JPEGs (50 MB), read in a shuffled order from the folder of files "
        "vs from one LMDB file; raw bytes (into a buffer you own) and decoded to RGB, with a "
        "warm page cache and a cold one (`POSIX_FADV_DONTNEED` before each repeat); and the "
        "conversion itself.",
        """\
Warm, LMDB reads raw bytes [[speedup LMDB, raw bytes, warm]] as fast as the files (a
fast local filesystem with a warm dentry cache; the ratio moves from run to run on this
shared machine): a file costs an open and a read, a record its copy and a little
Python. With a cold cache LMDB reads raw bytes [[speedup LMDB, raw bytes, cold]] as
fast, and readahead matters: off, each 4 KiB page of a record is a separate read
([[over LMDB, raw bytes, cold, readahead off | LMDB, raw bytes, cold]] the rate with it
on). Decoding dominates a warm epoch, which is where reduced-size
and GPU decoding come in.""",
    ),
    "cpu/cpu_augment": Notes(
        "Albumentations vs torchvision, and fastload",
        """\
The table "Albumentations vs torchvision" of the seed article, reproduced on the
generated JPEGs in one run: Resize 384x384, RandomCrop 256, flip, brightness/contrast
(p=0.2), one epoch of 1000 images, at batch sizes (BS) 1, 32 and 128 with 1 and 2
workers (NW). torchvision: PIL decode and `torchvision.transforms`; albumentations:
`cv2.imread` and the albumentations recipe; fastload: `ImageFolder` + `Albumentations` +
`uint8_collate` in a FastLoader with the same number of workers. The last rows decode
inside libjpeg at reduced scale, on the same JPEGs.""",
        """\
Decoding is most of the work once the resize is OpenCV's (PIL's resize alone costs as
much as a decode); the article measured albumentations at about 70 % of torchvision's
time. With one image per batch and two workers on two cores, every path is bound by
passing batches between processes.""",
    ),
    "cpu/object_storage": Notes(
        "Streaming shards from object storage",
        """\
`benchmarks/object_storage.py --link none --images 2000` reads 2,000 generated 500x375
JPEGs (about 100 MB, 8 MB shards) from the local S3 server over loopback (on the reader's
own cores, no latency, no bandwidth limit), with 2 workers. Each reader's workers read every
sample's bytes and hand over its size and label. Every pass is checked against the
shards' samples, bytes and labels. The peers read the same samples from the same server
in the same rounds, each in its own format and its own usual way
(`benchmarks/lib/streaming_peers.py`; writing and uploading their formats is not timed).
The faults pass goes through a loopback proxy, in a process of its own, that answers
10 % of requests 503 SlowDown, cuts 1 % of bodies short, changes a byte in 1 % and
stalls 1 % for 30 s.""",
        """\
fastload and litdata read a cold bucket about level (fastload
[[speedup fastload, cold cache]] the raw GETs, litdata [[speedup litdata]] in this run),
ahead of WebDataset, MosaicML Streaming and Ray Data; on 2 cores the server, the
downloads and the workers share the CPU, and every reader here is CPU-bound (Swift's
own processes take most of it). The cold pass through obstore (fastload's client for
the other stores) is about level with boto3's
([[speedup fastload, cold cache, obstore client]]). With faults injected the epoch is
exact,
every corrupted body caught by the shard's hash; hedged reads shorten it. The summary
counts the faults, the hedges and the longest wait for a batch over 20 cold runs.""",
    ),
    "cpu/object_storage_link_40ms_400mbit": Notes(
        "Streaming shards from S3 across a 40 ms, 400 Mbit/s link",
        link_method("400 Mbit/s", 20),
        """\
With latency in the way the readers spread out, and the raw GETs fill most of the link
(see the summary; on loopback the server's CPU was the limit). fastload cold reads at
[[speedup fastload, cold cache]] the best raw GETs at its default depth, which follows the
link (the depth it reached is in the summary), against
[[speedup fastload, cold cache, download_ahead=8]] at a fixed 8 shards ahead (the old
default) and [[speedup fastload, cold cache, download_ahead=16]] at 16;
[[speedup fastload, cold cache, obstore client]] through obstore's client (in its store
processes, off the loader's interpreter lock) and [[speedup fastload, cold cache, no hedging]]
without hedged reads (a request is hedged only once its bytes stop coming, so on a clean
link the two read about level); litdata reads at [[speedup litdata]],
MosaicML Streaming [[speedup MosaicML Streaming]], WebDataset [[speedup WebDataset]],
Ray Data [[speedup Ray Data]]. Warm, fastload reads at [[speedup fastload, warm cache]]
of local disk. With faults injected the epoch is exact and takes
[[over fastload, cold cache, via the proxy | fastload, cold cache, via the proxy, faults injected]]
the clean pass's time through the same proxy (a Python process copying every byte,
which is the limit of both).""",
    ),
    "cpu/object_storage_link_20ms_600mbit": Notes(
        "Streaming shards from S3 across a 20 ms, 600 Mbit/s link",
        link_method("600 Mbit/s", 10),
        """\
The shorter, fatter link, at 600 Mbit/s rather than 1 Gbit/s: at 1 Gbit/s the raw GETs
filled two thirds of the link on these two cores, and the run measured the CPU. fastload
cold reads at [[speedup fastload, cold cache]] the best raw GETs at its default depth
(following the link), [[speedup fastload, cold cache, download_ahead=8]] at a fixed 8
shards ahead and [[speedup fastload, cold cache, download_ahead=16]] at 16,
[[speedup fastload, cold cache, obstore client]] through obstore's client and
[[speedup fastload, cold cache, no hedging]] without hedged reads; litdata
[[speedup litdata]], MosaicML Streaming [[speedup MosaicML Streaming]], WebDataset
[[speedup WebDataset]], Ray Data [[speedup Ray Data]]. Warm, fastload reads at
[[speedup fastload, warm cache]] of local disk.""",
    ),
    **{
        f"cpu/object_storage_{store}_link_{name}": Notes(
            f"Streaming shards from {title} across a {label} link",
            link_method(rate, delay_ms, store),
            link_findings(title),
        )
        for store, title in (("gs", "Google Cloud Storage"), ("az", "Azure Blob Storage"))
        for name, label, rate, delay_ms in (
            ("40ms_400mbit", "40 ms, 400 Mbit/s", "400 Mbit/s", 20),
            ("20ms_600mbit", "20 ms, 600 Mbit/s", "600 Mbit/s", 10),
        )
    },
    "cpu/object_storage_gs": Notes(
        "Streaming shards from Google Cloud Storage",
        "The same passes as the S3 run (`--store gs`), from fake-gcs-server on 127.0.0.1 "
        "behind its upload-translating proxy (a Python process of its own, which every "
        "read passes through); the raw GETs through obstore, in this process. The peers "
        "run against S3 only. Here the raw GETs are faster than fastload's pass over the "
        "same shards on local disk, which bounds the cold pass.",
    ),
    "cpu/object_storage_az": Notes(
        "Streaming shards from Azure Blob Storage",
        "The same passes as the S3 run (`--store az`), from Microsoft's Azurite on "
        "127.0.0.1; the raw GETs through obstore, in this process. The peers run against "
        "S3 only.",
    ),
    "cpu/shard_index": Notes(
        "The cost of a shard set's index",
        "`benchmarks/shard_index.py`: `ShardedDataset(...)` constructed in a fresh process "
        "over a synthetic index of 1,281,167 samples (a `.jpg` and a `.cls` each) in 5,000 "
        "sparse shards, with the index of version 2 (every sample's members inline in "
        "`index.json`) and of version 3 (per-shard facts, members in a table per shard); 3 "
        "interleaved rounds, medians. RSS growth is the process's during construction; "
        "pickled is what each spawned worker receives.",
        "Version 3 constructs in a fraction of a second where version 2 parses every sample's "
        "entry, and pickles to about 1 MiB, a size that grows with the shards; a shard's table "
        "costs a few milliseconds on its first read. The [shards guide](guides/shards.md) "
        "describes both layouts and `fastload index --upgrade`.",
    ),
    "cpu/shuffle_quality": Notes(
        "Shuffle quality of sharded orders",
        "Computed, not timed: 1,000 classes written in label order, 256 MiB shards, 32 "
        "samples a GPU, 8 GPUs a node, a 16 GiB cache a node. Ratios are to a true "
        "permutation's; bytes are those downloaded by all nodes, as a multiple of the data "
        "set. The guide on [sharded datasets](guides/shards.md) explains windows and groups.",
    ),
    "cpu/gpu_augment": Notes(
        "GPU augmentation, run on a CPU",
        "`benchmarks/gpu_augment.py`'s `policy` recipe (RandomResizedCrop, flip, "
        "TrivialAugmentWide, RandomErasing) on this project's 2-core CPU: batches of 64 uint8 "
        "images of 256x256 to 224, 8 batches a pass, 3 interleaved rounds.",
        "On the CPU, per image in workers stays the fastest way; the `fastload.gpu` modules "
        "are for the GPU. On a CPU-only machine, crop in the workers.",
    ),
    "cpu/detection_augment": Notes(
        "Detection augmentation, run on a CPU",
        "`benchmarks/detection_augment.py` on 32 uint8 images of 384x384, each with 1 to 8 "
        "boxes, labels and (K, H, W) instance masks: RandomResizedCrop 320 (scale 0.3 to 1), "
        "a flip and SanitizeBoundingBoxes; torchvision v2 per sample in 2 DataLoader "
        "workers, the same in a loop in the main process, and `fastload.gpu` on the batch.",
        "On the CPU, `fastload.gpu` is the slowest of the three: its batched crop "
        "(`roi_align`) is slow on a CPU, and the rest is per image.",
    ),
}

INTRO = """\
# Benchmarks

<!-- Written by benchmarks/docs_page.py from benchmarks/results/: do not edit by hand. -->
"""

METHODS = """\
## How these are measured

Scripts in `benchmarks/`, one per question; each compares against what you would use
otherwise, in the same run, reports the median of several repeats after a warm-up, and
writes JSON (machine, versions, settings, every timing) to `benchmarks/results/cpu/` on
a machine without a GPU, `benchmarks/results/gpu/` on one with; `--plot` draws a PNG.
`make bench` runs the CPU ones; `make bench-gpu` runs the GPU suite, and `make
gpu-check` what a short GPU window measures first. This page is written from those
files by `python benchmarks/docs_page.py` (`make docs` runs it first). Figures measured
without a GPU come from this project's 2-core CPU machine; they are ratios, because the
machine is shared and noisy. Each result below names its machine; its date is the
commit that last changed its file.
"""


@dataclass(frozen=True)
class Headline:
    """A row of the headline table: fastload's row of a result file, what it shows against
    what, and the best peer measured in the same run (a row of the same file) beside it."""

    result: str
    row: str
    what: str
    peer: tuple[str, str] | None = None  # (the peer's name here, its row in the file)


#: The headline table, the one source of the figures that the README, the docs' home page
#: and this page open with, in this order.
HEADLINES = [
    Headline("cpu/peers", "fastload: image folder",
             "JPEG files to normalised 224 px batches, vs torchvision ImageFolder + PIL + "
             "DataLoader", ("FFCV", "FFCV")),
    Headline("gpu/gpu_augment", "seed: fastload.gpu",
             "per-sample augmentation of a batch on the GPU, vs torchvision per sample in a "
             "CPU worker per core", ("Kornia", "seed: Kornia AugmentationSequential")),
    Headline("gpu/gpu_augment", "seed: fastload.gpu + torch.compile",
             "the same augmentation under torch.compile, vs torchvision per sample in a CPU "
             "worker per core"),
    Headline("gpu/prefetch", "fastload DataPrefetcher, depth 2",
             "a ResNet-50 loop fed by DataPrefetcher, vs .cuda() then normalise",
             ("timm PrefetchLoader", "timm PrefetchLoader")),
    Headline("gpu/end_to_end_resnet18", "fastload, LMDB, GPU-FUSED decode",
             "ResNet-18 training from JPEGs, GPU decode, vs torchvision + DataLoader",
             ("NVIDIA DALI", "NVIDIA DALI, mixed decode, hw_decoder_load 0.65")),
    Headline("gpu/end_to_end_resnet18", "fastload, LMDB, CPU decode",
             "ResNet-18 training from JPEGs, CPU decode, vs torchvision + DataLoader"),
    Headline("gpu/gpu_decode", "GPUDecoder(224), nvjpeg: crop, flip, normalise to bf16 NHWC",
             "GPU decode to a finished batch, vs OpenCV's decode alone",
             ("NVIDIA DALI", "NVIDIA DALI, mixed decode, hw_decoder_load 0.65")),
    Headline("cpu/hf_datasets", "from_hf + FastLoader, DataPrefetcher normalises",
             "a Hugging Face image set, vs its usual set_transform recipe"),
    Headline("cpu/hf_datasets", "FastLoader(seed=0)",
             "seed= (draws keyed by sample) over cheap batched rows, vs DataLoader"),
    Headline("cpu/timm_loader", "fastload create_loader, 224px",
             "timm's train.py recipe at 224 px on a CPU, vs timm's own create_loader"),
    Headline("cpu/tensor_dataset", "FastLoader", "an in-memory TensorDataset, vs DataLoader"),
    Headline("cpu/frameworks", "Lightning: fastload (DataPrefetcher from train_dataloader)",
             "a small CNN under Lightning, vs its DataLoader + torchvision v2 path"),
    Headline("cpu/frameworks", "Accelerate: fastload (DataPrefetcher on accelerator.device)",
             "the same under Accelerate, vs its prepared DataLoader + torchvision v2"),
    Headline("cpu/small_batches", "image folder, batch 8: FastLoader",
             "batches of 8 small JPEGs (96 px), vs ImageFolder + DataLoader at batch 8"),
    Headline("cpu/lmdb_vs_files", "LMDB, raw bytes, warm",
             "raw bytes from one LMDB file, vs a folder of files, warm page cache"),
    Headline("cpu/lmdb_vs_files", "LMDB, raw bytes, cold",
             "raw bytes from one LMDB file, vs a folder of files, cold page cache"),
    Headline("cpu/object_storage", "fastload, cold cache",
             "shards from a cold S3 bucket (a server on the same machine), vs raw parallel GETs",
             ("litdata", "litdata")),
    Headline("cpu/object_storage_link_40ms_400mbit", "fastload, cold cache",
             "the same across a shaped 40 ms, 400 Mbit/s link, vs the best raw GETs",
             ("litdata", "litdata")),
]  # fmt: skip


def result_files(results: Path) -> list[Path]:
    """Every result JSON, at the top of ``results`` or one folder down: the benchmarks
    first, then the test runs (``is_run``); each group in ``NOTES``' order, then the
    others by path."""
    found = {key(path, results): path for path in results.glob("*.json")}
    found |= {key(path, results): path for path in results.glob("*/*.json")}
    order = {name: index for index, name in enumerate(NOTES)}
    return [
        found[name]
        for name in sorted(
            found, key=lambda name: (is_run(name), order.get(name, len(order)), name)
        )
    ]


def is_run(name: str) -> bool:
    """Whether a result records a run (of the tests with CUDA, of `make gpu-check`'s or the
    GPU suite's parts) rather than a benchmark: its section comes after every benchmark's."""
    stem = name.rpartition("/")[2]
    return stem in ("check", "suite") or stem.startswith("cuda_tests")


RUNS = """\
## Test runs

What the GPU runs themselves did: `make gpu-check`'s and the GPU suite's parts, each
with its status and time, and the test suite's runs with CUDA visible.
"""


def key(path: Path, results: Path) -> str:
    """A result's name on this page: its path under ``results``, without ``.json``."""
    return path.relative_to(results).with_suffix("").as_posix()


def heading(name: str) -> str:
    """A result's heading: its file stem, after its folder for one in a folder
    (``gpu: prefetch``). Its anchor, on the site as on GitHub, is ``#gpu-prefetch`` for
    ``results/gpu/prefetch.json`` (``#prefetch`` for a file at the top of ``results``)."""
    folder, _, stem = name.rpartition("/")
    return f"{folder}: {stem}" if folder else stem


def anchor(name: str) -> str:
    """The anchor of a result's section: the slug Python-Markdown's toc and GitHub both
    give its heading."""
    return name.replace("/", "-")


def machine_line(machine: dict) -> str:
    device = machine["device"]
    if machine.get("driver") or machine.get("gpu_memory_gib"):
        device += f" (driver {machine.get('driver')}, CUDA {machine.get('cuda')})"
    return (
        f"{device}, {machine['cpus']} CPUs; torch {machine['torch']}, "
        f"torchvision {machine['torchvision']}, Python {machine.get('python', '?')}"
    )


def cell(value: object) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text.replace("|", "\\|").replace("\n", " ")


def end_to_end_setup(settings: dict) -> str:
    """What an end-to-end GPU result measured, read from its own settings (older results
    lack the later ones)."""
    text = (
        f"{settings['model']} training (batch {settings['batch_size']}, "
        f"{settings['image_size']} px, handed over as {settings.get('dtype', 'float32')}) "
        f"from {settings['data']}: fastload's {settings['decodes']} decode "
        f"({settings.get('storages', 'folder,lmdb')}), torchvision ImageFolder + DataLoader "
        f"with {settings['baseline_workers']} workers"
    )
    if settings.get("dali"):
        text += f", NVIDIA DALI at hw_decoder_load {settings['dali']}"
    if "storages" in settings:
        wait = "the GPU's idle time between steps, from CUDA events"
    else:
        wait = "the host's wait for each batch, the GPU synchronised before it (the first harness)"
    return f"{text}; {settings['rounds']} round(s). Data wait: {wait}."


def link(path: Path, page: Path) -> str:
    return Path(os.path.relpath(path, page.parent)).as_posix()


def suite_section(data: dict, results: Path) -> list[str]:
    """The GPU suite's last run: each part's status and time, and the parts not run yet."""
    lines = ["| part | result | status | seconds |", "|---|---|---|---|"]
    for part in data["parts"]:
        result = f"`{part['result']}`" if part.get("result") else "-"
        lines.append(f"| `{part['part']}` | {result} | {part['status']} | {part['seconds']} |")
    gpu = results / "gpu"
    missing = [
        notes.title
        for name, notes in NOTES.items()
        if name.startswith("gpu/")
        and name != "gpu/suite"
        and not (gpu / f"{name[4:]}.json").exists()
    ]
    if missing:
        lines += ["", f"Not measured on a GPU yet: {', '.join(missing)}."]
    return ["The last run, part by part:", "", *lines]


def section(path: Path, results: Path, page: Path) -> list[str]:
    name = key(path, results)
    data = json.loads(path.read_text())
    notes = NOTES.get(name, Notes(data.get("benchmark", path.stem)))
    about = notes.about
    if name.startswith("gpu/end_to_end") and "settings" in data:
        about = f"{end_to_end_setup(data['settings'])} {about}"
    lines = [f"## {heading(name)}", "", f"**{notes.title}.** {about}".rstrip()]
    benchmark = data.get("benchmark", path.stem)
    scripts = results.parent  # benchmarks/, for benchmarks/results
    script = scripts / ("gpu_suite.py" if path.stem.startswith("suite") else f"{benchmark}.py")
    sources = [f"script [`{script.name}`]({link(script, page)})"] if script.exists() else []
    sources.append(f"result [`{name}.json`]({link(path, page)})")
    if "machine" in data:
        lines += ["", f"Measured on {machine_line(data['machine'])}."]
    if "parts" in data:
        lines += ["", *suite_section(data, results)]
    if "table" in data:
        lines += ["", data["table"]]
    png = path.with_suffix(".png")
    if png.exists():
        lines += ["", f"![{name}]({link(png, page)})"]
    notes_in_rows = [
        f"- {row['name']}: {row['note']}"
        for row in data.get("rows", [])
        if row.get("note") and row["note"] not in data.get("table", "")
    ]
    if notes_in_rows:
        lines += ["", "Notes:", "", *dict.fromkeys(notes_in_rows)]
    if notes.findings:
        lines += ["", quoted(notes.findings, data.get("rows", []), name)]
    details = []
    if data.get("settings"):
        details += ["| setting | value |", "|---|---|"]
        details += [f"| {cell(k)} | {cell(v)} |" for k, v in data["settings"].items()]
    if data.get("summary"):
        details += ["", "Summary:", "", "```json", json.dumps(data["summary"], indent=1), "```"]
    if details:
        summary = "Settings" + (" and summary" if data.get("summary") else "")
        lines += ["", '<details markdown="1">', f"<summary>{summary}</summary>", "", *details]
        lines += ["", "</details>"]
    lines += ["", f"Source: {', '.join(sources)}.", ""]
    return lines


#: ``[[kind ROW]]`` or ``[[kind ROW | OTHER]]`` in a note's findings.
FIGURE = re.compile(
    r"\[\[(speedup|cpu share|cpu above|cpu|over)\s([^|\]]+?)(?:\s\|\s([^\]]+?))?\]\]"
)


def quoted(text: str, rows: list[dict], name: str) -> str:
    """``text`` with each figure it quotes (see :class:`Notes`) read from ``rows``; a
    row the result does not have is an error naming it (the findings need rewriting)."""
    by_name = {row["name"]: row for row in rows}

    def row(wanted: str) -> dict:
        if wanted not in by_name:
            raise KeyError(f"{name}: the findings quote the row {wanted!r}, which it lacks")
        return by_name[wanted]

    def cpu(wanted: str) -> float:
        found = row(wanted)
        return float(next(v for k, v in found.items() if k.startswith("CPU ms/")))

    def figure(match: re.Match[str]) -> str:
        kind, first, second = (None if g is None else " ".join(g.split()) for g in match.groups())
        if kind == "speedup":
            return f"{row(first)['speedup']:.2f}x"
        if kind == "cpu":
            return f"{cpu(first):.2f}"
        if second is None:
            raise ValueError(f"{name}: [[{kind} ...]] compares two rows: [[{kind} A | B]]")
        if kind == "over":
            return f"{row(first)['per_second'] / row(second)['per_second']:.2f}x"
        if kind == "cpu share":
            return f"{100 * cpu(first) / cpu(second):.0f} %"
        return f"{cpu(first) - cpu(second):.2f}"

    return FIGURE.sub(figure, text)


def committed(path: Path) -> str:
    """The date of the commit that last changed ``path`` (``not committed`` before one)."""
    done = subprocess.run(["git", "log", "-1", "--format=%cs", "--", str(path)], cwd=ROOT,
                          capture_output=True, text=True)  # fmt: skip
    return done.stdout.strip() or "not committed"


def rounds(row: dict, baseline: dict) -> list[float]:
    """The ratio of each round: a row's throughput over its baseline's, timed in the same
    round (the rounds are interleaved); none where the two were not timed round by round."""
    timed = row.get("seconds") or []
    if row is baseline or len(timed) < 2 or len(timed) != len(baseline.get("seconds") or []):
        return []
    return [
        (row["items"] / mine) / (baseline["items"] / theirs)
        for mine, theirs in zip(timed, baseline["seconds"], strict=True)
    ]


def figure(row: dict, rows: dict[str, dict], bold: bool = False) -> str:
    """A row's ratio with the range of its rounds: ``1.85x (1.64 to 2.05)``."""
    ratios = rounds(row, rows.get(row.get("versus", ""), row))
    text = f"**{row['speedup']:.2f}x**" if bold else f"{row['speedup']:.2f}x"
    low, high = (f"{min(ratios):.2f}", f"{max(ratios):.2f}") if ratios else ("", "")
    return f"{text} ({low} to {high})" if low != high else text


def machine_name(machine: dict) -> str:
    """The machine, short: ``2-core CPU`` without a GPU, else the GPU and its CPU cores."""
    if machine["device"].startswith("no GPU"):
        return f"{machine['cpus']}-core CPU"
    return f"{machine['device']}, {machine['cpus']} CPU cores"


HEADLINE_NOTE = """\
Each ratio is fastload's throughput over the baseline named, both measured in the same run
on the machine named; in brackets, the lowest and highest ratio of the run's interleaved
rounds. The peer is the best other library measured in the same run. The section linked
gives the whole table, its plot and its settings."""


def headline_table(results: Path, sections: str = "") -> list[str]:
    """The note and each of ``HEADLINES`` found in the results: its ratio and range, the
    peer's, the machine and the date, linked to its section on the page at ``sections``
    (``""``: this page)."""
    lines = []
    for headline in HEADLINES:
        path = results / f"{headline.result}.json"
        if not path.exists():
            continue
        data = json.loads(path.read_text())
        rows = {row["name"]: row for row in data.get("rows", [])}
        row = rows.get(headline.row)
        if row is None or row.get("speedup") is None:
            continue
        peer = "-"
        if headline.peer and (found := rows.get(headline.peer[1])) and found.get("speedup"):
            peer = f"{headline.peer[0]} {figure(found, rows)}"
        link = f"[{heading(headline.result)}]({sections}#{anchor(headline.result)})"
        lines.append(
            f"| {headline.what} | {figure(row, rows, bold=True)} | {peer} "
            f"| {machine_name(data['machine'])} | {committed(path)} | {link} |"
        )
    if not lines:
        return []
    return [
        HEADLINE_NOTE, "",
        "| what, against what | fastload | best peer, same run | machine | date | details |",
        "|---|---|---|---|---|---|",
        *lines,
    ]  # fmt: skip


def headline(results: Path) -> list[str]:
    """The section the page opens with."""
    table = headline_table(results)
    return ["## Results", "", *table, ""] if table else []


#: A copy of the headline table goes between these two lines.
HEADLINE_START = "<!-- headline: written by benchmarks/docs_page.py from benchmarks/results/ -->"
HEADLINE_END = "<!-- end of headline -->"
HOME = ROOT / "docs" / "index.md"
README = ROOT / "README.md"
#: The pages that carry a copy of the headline table, each with the path from it to this page.
COPIES = {HOME: "benchmarks.md", README: "docs/benchmarks.md"}


def headline_copy(page: Path, to_page: str, results: Path = RESULTS) -> str:
    """``page``'s text with the headline table between its markers, linked to the
    benchmarks page at ``to_page``."""
    text = page.read_text()
    if text.count(HEADLINE_START) != 1 or text.count(HEADLINE_END) != 1:
        raise ValueError(f"{page}: no {HEADLINE_START} ... {HEADLINE_END} block for the table")
    before, _, rest = text.partition(HEADLINE_START + "\n")
    _, _, after = rest.partition(HEADLINE_END)
    table = "\n".join(headline_table(results, to_page))
    return f"{before}{HEADLINE_START}\n{table}\n{HEADLINE_END}{after}"


def render(results: Path = RESULTS, page: Path = PAGE) -> str:
    """The whole page, for ``page`` (links are relative to its folder)."""
    files = result_files(results)
    lines = [INTRO, *headline(results), METHODS]
    if not (results / "gpu").is_dir() or not any((results / "gpu").glob("*.json")):
        lines += [
            "**No GPU run yet.** No figure on this page was measured on a GPU: they come "
            "from `make bench-gpu` on a GPU machine, then `python benchmarks/docs_page.py`.",
            "",
        ]
    for path in files:
        if is_run(key(path, results)) and RUNS not in lines:
            lines.append(RUNS)
        lines += section(path, results, page)
    return "\n".join(lines).rstrip() + "\n"


def pages(results: Path = RESULTS, page: Path = PAGE) -> dict[Path, str]:
    """Every page this writes, with its text: ``page``, and for the docs' own page the
    copies of its headline table (``COPIES``)."""
    texts = {page: render(results, page)}
    if page == PAGE:
        texts |= {copy: headline_copy(copy, to, results) for copy, to in COPIES.items()}
    return texts


def write(results: Path = RESULTS, page: Path = PAGE) -> bool:
    """Write the page (and the copies of its headline table); True if any changed."""
    changed = False
    for path, text in pages(results, page).items():
        if path.exists() and path.read_text() == text:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        changed = True
    return changed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--page", type=Path, default=PAGE)
    parser.add_argument("--check", action="store_true", help="only say whether it is current")
    args = parser.parse_args()
    if not args.results.is_dir():
        print(f"docs_page: no results folder {args.results}", file=sys.stderr)
        sys.exit(2)
    if args.check:
        stale = [
            path
            for path, text in pages(args.results, args.page).items()
            if not path.exists() or path.read_text() != text
        ]
        for path in stale:
            print(f"{path}: out of date: run python benchmarks/docs_page.py")
        if not stale:
            print(f"{args.page}: up to date")
        sys.exit(1 if stale else 0)
    changed = write(args.results, args.page)
    print(f"{args.page}: {'updated' if changed else 'already up to date'}")


if __name__ == "__main__":
    main()
