"""A Lightning training run for tests/integrations/test_lightning.py (CPU; one process, or
two under ``strategy="ddp"`` over gloo, started by Lightning's own launcher).

``--feed``:
- ``prefetcher``: ``train_dataloader()`` returns a DataPrefetcher over a FastLoader, with a
  keyed GPU flip, on the strategy's device (the guide's way);
- ``loader``: ``train_dataloader()`` returns the FastLoader;
- ``outside``: a FastLoader over a TensorDataset, made before the Trainer and given to
  ``fit`` (Lightning re-creates it with its own DistributedSampler under ddp).

``--save-at N`` checkpoints after step N of the first epoch and stops; ``--resume`` fits
from that checkpoint. Each rank appends one JSON line per step to ``log-RANK.jsonl``:
``[epoch, batch index, [sample indices], [each sample's [left, right] pixel]]``, and
writes the workers its FastLoader chose to ``workers-RANK.txt``.

Usage: python lightning_train.py WORKDIR --feed prefetcher|loader|outside [--devices 2]
    [--save-at N] [--resume]
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import signal
from pathlib import Path

import lightning as L
import torch
from drawn import BATCH, EPOCHS, Drawn
from lightning.pytorch.callbacks import ModelCheckpoint
from torch import nn
from torch.utils.data import TensorDataset

from fastload import DataPrefetcher, FastLoader, gpu


def drawn_tensors() -> TensorDataset:
    """Such samples in memory, drawn alike in every process (in-memory tensors take
    FastLoader's batched path)."""
    torch.manual_seed(0)
    samples = [Drawn()[i] for i in range(len(Drawn()))]
    return TensorDataset(torch.stack([image for image, _ in samples]), torch.arange(len(samples)))


class Model(L.LightningModule):
    def __init__(self, workdir: Path, feed: str) -> None:
        super().__init__()
        self.workdir, self.feed = workdir, feed
        self.layer = nn.Linear(3 * 8 * 8, 2)

    def train_dataloader(self):  # type: ignore[no-untyped-def]
        loader = FastLoader(Drawn(), batch_size=BATCH, shuffle=True, seed=7, num_workers="auto")
        (self.workdir / f"workers-{self.global_rank}.txt").write_text(str(loader.num_workers))
        if self.feed == "loader":
            return loader
        device = self.trainer.strategy.root_device
        return DataPrefetcher(loader, device, dtype=None, transform=gpu.RandomHorizontalFlip())

    def training_step(self, batch, batch_index):  # type: ignore[no-untyped-def]
        images, labels = batch
        line = [self.current_epoch, batch_index, labels.tolist(), images[:, 0, 0, [0, -1]].tolist()]
        with (self.workdir / f"log-{self.global_rank}.jsonl").open("a") as log:
            log.write(json.dumps(line) + "\n")
        return self.layer(images.flatten(1).float()).logsumexp(dim=1).mean()

    def configure_optimizers(self):  # type: ignore[no-untyped-def]
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main() -> None:
    # a run that stops answering is asked for every thread's stack (SIGUSR1, sent by the
    # test to the whole session: both ranks and their loader workers, which inherit this)
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    parser = argparse.ArgumentParser()
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--feed", choices=["prefetcher", "loader", "outside"], required=True)
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--save-at", type=int, default=None)
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args()

    checkpoints = args.workdir / "checkpoints"
    callbacks = []
    if args.save_at is not None:
        callbacks.append(ModelCheckpoint(checkpoints, every_n_train_steps=args.save_at,
                                         save_top_k=-1, filename="saved"))  # fmt: skip
    trainer = L.Trainer(
        accelerator="cpu", devices=args.devices,
        strategy="ddp" if args.devices > 1 else "auto",
        max_epochs=EPOCHS, max_steps=args.save_at or -1, callbacks=callbacks,
        logger=False, enable_progress_bar=False, enable_model_summary=False,
        enable_checkpointing=args.save_at is not None,
    )  # fmt: skip
    model = Model(args.workdir, args.feed)
    data = None
    if args.feed == "outside":
        data = FastLoader(drawn_tensors(), batch_size=BATCH, shuffle=True, seed=7)
    ckpt = checkpoints / "saved.ckpt" if args.resume else None
    trainer.fit(model, train_dataloaders=data, ckpt_path=ckpt)
    if torch.distributed.is_initialized():
        # Lightning leaves its process group up; gloo's threads still running at the
        # interpreter's exit have aborted a finished run ("terminate called without an
        # active exception", once in a CI run)
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
