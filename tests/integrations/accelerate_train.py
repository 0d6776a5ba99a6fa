"""A training run under Hugging Face Accelerate, for tests/integrations/test_accelerate.py:
launched by torchrun (gloo, CPU), it trains two epochs from a FastLoader given to
``accelerator.prepare`` (``--feed prepare``) or through a DataPrefetcher on
``accelerator.device`` (``--feed prefetcher``), and can save its state mid-epoch with
``accelerator.save_state`` and stop, or start from such a state (``load_state``).

Each rank appends one JSON line per step: ``[epoch, step in the epoch, [sample indices],
[each sample's [left, right] pixel]]``: its random draw, where a random flip put it; with
``seed``, both depend on the sample and the epoch alone.

Usage: torchrun --nproc-per-node N accelerate_train.py WORKDIR --feed prepare|prefetcher
    [--save-at STEP] [--resume] [--register fed|loader|both]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from accelerate import Accelerator
from drawn import BATCH, EPOCHS, Drawn
from torch import nn

from fastload import DataPrefetcher, FastLoader, gpu


class Progress:
    """The epoch a run is in: a custom object Accelerate checkpoints beside the loader."""

    def __init__(self) -> None:
        self.epoch = 0

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch = state["epoch"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--feed", choices=["prepare", "prefetcher"], required=True)
    parser.add_argument("--save-at", type=int, default=None, help="step of the first epoch")
    parser.add_argument("--resume", action="store_true")
    parser.add_argument(
        "--register", choices=["fed", "loader", "both"], default="fed",
        help="what register_for_checkpointing gets: what the loop iterates, the FastLoader "
        "behind a prefetcher, or both",
    )  # fmt: skip
    args = parser.parse_args()

    accelerator = Accelerator(cpu=True)
    model = nn.Linear(3 * 8 * 8, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = FastLoader(Drawn(), batch_size=BATCH, shuffle=True, seed=7, num_workers=2)
    if args.feed == "prepare":
        model, optimizer, batches = accelerator.prepare(model, optimizer, loader)
        assert type(batches) is FastLoader, type(batches)
    else:
        model, optimizer = accelerator.prepare(model, optimizer)
        flip = gpu.RandomHorizontalFlip()  # keyed by the loader's seed through the prefetcher
        batches = DataPrefetcher(loader, accelerator.device, dtype=None, transform=flip)
    progress = Progress()
    registered = {"fed": [batches], "loader": [loader], "both": [loader, batches]}
    accelerator.register_for_checkpointing(*registered[args.register], progress)
    checkpoint = args.workdir / "checkpoint"
    if args.resume:
        accelerator.load_state(str(checkpoint))

    log = (args.workdir / f"log-{accelerator.process_index}.jsonl").open("a")
    while progress.epoch < EPOCHS:
        step = batches.state_dict()["batches"]  # of this epoch, before a resume's first
        for images, labels in batches:
            step += 1
            draws = images[:, 0, 0, [0, -1]].tolist()  # [draw, 0], or [0, draw] if flipped
            log.write(json.dumps([progress.epoch, step, labels.tolist(), draws]) + "\n")
            loss = model(images.flatten(1).float()).logsumexp(dim=1).mean()
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            if progress.epoch == 0 and step == args.save_at:
                log.close()
                accelerator.save_state(str(checkpoint))
                accelerator.wait_for_everyone()
                return
        progress.epoch += 1
    log.close()
    accelerator.wait_for_everyone()


if __name__ == "__main__":
    main()
