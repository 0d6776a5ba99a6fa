"""A training run under Hugging Face Accelerate, for tests/integrations/test_accelerate.py:
launched by torchrun (gloo, CPU), it trains two epochs from a FastLoader given to
``accelerator.prepare`` (``--feed prepare``) or through a DataPrefetcher on
``accelerator.device`` (``--feed prefetcher``), and can save its state mid-epoch with
``accelerator.save_state`` and stop, or start from such a state (``load_state``): with
``--register none`` the loader is prepared in both feeds and only Accelerate's own
checkpointing (``use_stateful_dataloader=True``) keeps its place.

``--evaluate`` instead reads ``EVALUATED`` samples once, from a prepared FastLoader and
through a DataPrefetcher over it, and writes each rank's indices read and what
``gather_for_metrics`` gathered of them to ``evaluate-RANK.json``.

Each rank appends one JSON line per step: ``[epoch, step in the epoch, [sample indices],
[each sample's [left, right] pixel]]``: its random draw, where a random flip put it; with
``seed``, both depend on the sample and the epoch alone.

Usage: torchrun --nproc-per-node N accelerate_train.py WORKDIR --feed prepare|prefetcher
    [--save-at STEP] [--resume] [--register fed|loader|both|none] | --evaluate
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from accelerate import Accelerator, DataLoaderConfiguration
from drawn import BATCH, EPOCHS, Drawn
from torch import nn
from torch.utils.data import TensorDataset

from fastload import DataPrefetcher, FastLoader, gpu

EVALUATED = 101  # not a multiple of 2 ranks x 4: DistributedSampler pads one sample


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
        "--register", choices=["fed", "loader", "both", "none"], default="fed",
        help="what register_for_checkpointing gets: what the loop iterates, the FastLoader "
        "behind a prefetcher, both, or none (Accelerate's use_stateful_dataloader)",
    )  # fmt: skip
    parser.add_argument("--evaluate", action="store_true")
    args = parser.parse_args()

    stateful = DataLoaderConfiguration(use_stateful_dataloader=args.register == "none")
    accelerator = Accelerator(cpu=True, dataloader_config=stateful)
    try:
        if args.evaluate:
            evaluate(accelerator, args.workdir)
        else:
            train(accelerator, args)
    finally:
        # A rank leaving while gloo still holds its peer's connections aborts the peer
        # ("terminate called without an active exception"): meet, then close the group.
        accelerator.wait_for_everyone()
        accelerator.end_training()


def train(accelerator: Accelerator, args: argparse.Namespace) -> None:
    model = nn.Linear(3 * 8 * 8, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = FastLoader(Drawn(), batch_size=BATCH, shuffle=True, seed=7, num_workers=2)
    if args.feed == "prepare" or args.register == "none":
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        assert type(loader) is FastLoader, type(loader)
    else:
        model, optimizer = accelerator.prepare(model, optimizer)
    batches = loader
    if args.feed == "prefetcher":
        flip = gpu.RandomHorizontalFlip()  # keyed by the loader's seed through the prefetcher
        batches = DataPrefetcher(loader, accelerator.device, dtype=None, transform=flip)
    progress = Progress()
    registered = {"fed": [batches], "loader": [loader], "both": [loader, batches], "none": []}
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
                return
        progress.epoch += 1
    log.close()


def evaluate(accelerator: Accelerator, workdir: Path) -> None:
    """One pass over ``EVALUATED`` samples from a prepared FastLoader, then one through
    a DataPrefetcher over it: the indices this rank read, and the gathered ones."""
    data = TensorDataset(torch.arange(EVALUATED))
    loader = accelerator.prepare(FastLoader(data, batch_size=BATCH, shuffle=True, seed=7))
    found = {}
    for name, feed in (("prepare", loader), ("prefetcher", DataPrefetcher(loader, dtype=None))):
        read, gathered = [], []
        for (indices,) in feed:
            read += indices.tolist()
            gathered += accelerator.gather_for_metrics(indices).tolist()
        found[name] = {"read": read, "gathered": gathered}
    (workdir / f"evaluate-{accelerator.process_index}.json").write_text(json.dumps(found))


if __name__ == "__main__":
    main()
