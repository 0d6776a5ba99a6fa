"""A tiny training run for tests/loader/test_resume_killed.py, run as a script (alone, or
under torchrun on gloo): it logs each step's (sample index, hash of the augmented
sample), checkpoints model, optimizer and loader at ``--save-at``, and kills itself with
SIGKILL at ``--kill-at``; ``--resume`` continues from the checkpoint.

Augmentation is drawn in the workers (Python, NumPy and torch generators) and on the
batch (``fastload.gpu`` through DataPrefetcher), all keyed by ``FastLoader(seed=...)``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import signal

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import Dataset

from fastload import DataPrefetcher, FastLoader, gpu

EPOCHS, SAMPLES, BATCH = 2, 48, 4


class Augmented(Dataset):
    """Image ``i``: a fixed 8x8 pattern of its own, cropped at a random offset to 6x6,
    maybe flipped, brightened by a random amount."""

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        base = torch.Generator().manual_seed(index)
        image = torch.randint(0, 200, (3, 8, 8), generator=base, dtype=torch.uint8)
        top, left = random.randint(0, 2), random.randint(0, 2)
        image = image[:, top : top + 6, left : left + 6]
        if np.random.rand() < 0.5:
            image = image.flip(-1)
        return image + torch.randint(0, 50, (), dtype=torch.uint8), index


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("log")
    parser.add_argument("checkpoint")
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--save-at", type=int, default=0)
    parser.add_argument("--kill-at", type=int, default=0)
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args()

    rank = 0
    if "WORLD_SIZE" in os.environ:  # under torchrun
        dist.init_process_group("gloo")
        rank = dist.get_rank()
    log_path, checkpoint_path = f"{args.log}.rank{rank}", f"{args.checkpoint}.rank{rank}"

    torch.manual_seed(0)
    model = nn.Linear(3 * 6 * 6, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = FastLoader(
        Augmented(), batch_size=BATCH, shuffle=True, num_workers=args.workers, seed=1234
    )
    batches = DataPrefetcher(
        loader, device="cpu", dtype=None, transform=gpu.RandomErasing(p=0.5, value=7)
    )

    step, start_epoch = 0, 0
    if args.resume:
        checkpoint = torch.load(checkpoint_path, weights_only=True)
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        batches.load_state_dict(checkpoint["loader"])
        step, start_epoch = checkpoint["step"], checkpoint["loader"]["epoch"]

    with open(log_path, "a") as log:
        for epoch in range(start_epoch, EPOCHS):
            for images, labels in batches:
                step += 1
                for index, image in zip(labels.tolist(), images, strict=True):
                    digest = hashlib.sha1(image.numpy().tobytes()).hexdigest()[:16]
                    log.write(f"{step} {epoch} {index} {digest}\n")
                log.flush()  # in the kernel's hands: SIGKILL cannot lose it
                loss = model(images.flatten(1).float()).logsumexp(1).mean()
                optimizer.zero_grad()
                loss.backward()
                if dist.is_initialized():  # data parallel by hand: the ranks in step
                    for parameter in model.parameters():
                        dist.all_reduce(parameter.grad)
                optimizer.step()
                if step == args.save_at:
                    state = {
                        "model": model.state_dict(),
                        "optimizer": optimizer.state_dict(),
                        "loader": batches.state_dict(),
                        "step": step,
                    }
                    torch.save(state, checkpoint_path + ".part")
                    os.replace(checkpoint_path + ".part", checkpoint_path)
                if step == args.kill_at:
                    os.kill(os.getpid(), signal.SIGKILL)
        weights = torch.cat([p.detach().flatten() for p in model.parameters()])
        log.write(f"weights {hashlib.sha1(weights.numpy().tobytes()).hexdigest()}\n")
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
