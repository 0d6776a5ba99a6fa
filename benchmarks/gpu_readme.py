"""Write the GPU results into the README: the block between the ``gpu-results`` markers is
rebuilt from benchmarks/results/gpu/*.json, so every GPU figure there is one that
``gpu_suite.py`` measured, and each table names its result file.

Usage:
    python benchmarks/gpu_readme.py [--results benchmarks/results/gpu] [--readme README.md]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from common import RESULTS

ROOT = Path(__file__).resolve().parent.parent
BEGIN = "<!-- gpu-results:begin: written by benchmarks/gpu_readme.py, do not edit by hand -->"
END = "<!-- gpu-results:end -->"

#: Result file -> (title, what it measures and the goal it is held to).
PARTS = {
    "cuda_tests": (
        "CUDA tests",
        "The whole pytest suite with CUDA visible (the `needs_cuda` tests included).",
    ),
    "prefetch": (
        "Prefetch overlap",
        "A ResNet-50 step (bf16 autocast, channels_last, SGD, batch 256, 224 px) fed from a "
        "uint8 loader; data wait is the share of the loop in which the GPU ran no step. "
        "Goal: under 2 % when the loader keeps up, never behind apex or timm.",
    ),
    "gpu_augment": (
        "GPU augmentation",
        "256 uint8 images of 384x384 to float 224x224 through the recipes in the table "
        "(seed and timm; policy, with TrivialAugmentWide, from the runs after it was added). "
        "Goal: at least 20x the per-sample CPU recipe in one worker per core, ahead of Kornia.",
    ),
    "detection_augment": (
        "Detection augmentation",
        "64 uint8 images of 384x384 with 1 to 8 boxes, labels and instance masks each, "
        "through RandomResizedCrop 320, flip and SanitizeBoundingBoxes: fastload.gpu on the "
        "batch against torchvision v2 per sample in one worker per core.",
    ),
    "gpu_decode": (
        "GPU JPEG decoding",
        "500x375 crops of real photographs, quality 90, batches of 256. Goal: at least 8,000 "
        "images/s on one H100 (torchvision reports more than 8,000 on an A100).",
    ),
    "end_to_end": ("End to end, ResNet-50", "Goal: ahead of DALI, the GPU idle under 2 %."),
    "end_to_end_resnet18": (
        "End to end, ResNet-18",
        "The GPU-starved case. Goal: at least 90 % of the step alone, ahead of DALI.",
    ),
    "gpu_memory": (
        "Memory over epochs",
        "Reserved CUDA memory after each of 5 epochs. Goal: flat.",
    ),
}


def end_to_end_setup(settings: dict) -> str:
    """What an end-to-end result measured, read from its own settings (older results
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


def machine_line(machine: dict) -> str:
    return (
        f"{machine['device']}, driver {machine.get('driver')}, CUDA {machine.get('cuda')}, "
        f"torch {machine['torch']}, torchvision {machine['torchvision']}, "
        f"{machine['cpus']} CPUs"
    )


def part_status(results: Path) -> dict[str, str]:
    summary = results / "suite.json"
    if not summary.exists():
        return {}
    return {part["benchmark"]: part["status"] for part in json.loads(summary.read_text())["parts"]}


def block(results: Path, readme: Path) -> str:
    found = {
        name: results / f"{name}.json" for name in PARTS if (results / f"{name}.json").exists()
    }
    if not found:
        return (
            "**No GPU run yet.** No figure in this section has been measured: it is filled by "
            "`make bench-gpu` on a GPU machine, then `python benchmarks/gpu_readme.py`."
        )
    statuses = part_status(results)
    lines = []
    for name, path in found.items():
        title, description = PARTS[name]
        data = json.loads(path.read_text())
        if name.startswith("end_to_end"):
            description = f"{end_to_end_setup(data['settings'])} {description}"
        link = os.path.relpath(path, readme.parent)
        lines += [
            f"#### {title}",
            "",
            description,
            "",
            f"Measured on {machine_line(data['machine'])}.",
        ]
        status = statuses.get(name, "ok")
        if status != "ok":
            lines += ["", f"This part ended: {status}."]
        lines += ["", data["table"], ""]
        png = path.with_suffix(".png")
        if png.exists():
            lines += [f"![{name}]({os.path.relpath(png, readme.parent)})", ""]
        lines += [f"Source: [`{link}`]({link}).", ""]
    missing = [PARTS[name][0] for name in PARTS if name not in found]
    if missing:
        lines.append(f"Not measured on a GPU yet: {', '.join(missing)}.")
    return "\n".join(lines).rstrip()


def rewrite(readme: Path, results: Path) -> bool:
    """Replace the marked block; True if the README changed."""
    text = readme.read_text()
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise ValueError(f"{readme} needs one '{BEGIN}' line and one '{END}' line after it")
    head, rest = text.split(BEGIN)
    _, tail = rest.split(END)
    new = f"{head}{BEGIN}\n{block(results, readme)}\n{END}{tail}"
    if new != text:
        readme.write_text(new)
    return new != text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS / "gpu")
    parser.add_argument("--readme", type=Path, default=ROOT / "README.md")
    args = parser.parse_args()
    try:
        changed = rewrite(args.readme, args.results)
    except (OSError, ValueError) as error:
        print(f"gpu_readme: {error}", file=sys.stderr)
        sys.exit(2)
    print(f"{args.readme}: {'updated' if changed else 'already up to date'}")


if __name__ == "__main__":
    main()
