"""Train a small MLP on in-memory tensors with FastLoader; runs alone or under torchrun.

python examples/train_tensors.py
torchrun --nproc-per-node 2 examples/train_tensors.py   # gloo on CPU, nccl on GPUs
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import TensorDataset

from fastload import FastLoader


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--batch-size", type=int, default=4096)
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()

    distributed = "RANK" in os.environ  # set by torchrun
    if distributed:
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    rank = dist.get_rank() if distributed else 0
    device = torch.device(
        f"cuda:{os.environ.get('LOCAL_RANK', 0)}" if torch.cuda.is_available() else "cpu"
    )

    torch.manual_seed(0)  # the same data and initial weights on every rank
    features = torch.randn(args.rows, 64)
    labels = (features[:, :8].sum(dim=1) > 0).long()
    loader = FastLoader(TensorDataset(features, labels), batch_size=args.batch_size, shuffle=True)
    if rank == 0:
        print(loader)

    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 2)).to(device)
    if distributed:
        model = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(args.epochs):
        start, correct, seen = time.perf_counter(), 0, 0
        for x, y in loader:  # each rank reads its own shard, reshuffled every epoch
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            logits = model(x)
            loss = nn.functional.cross_entropy(logits, y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            correct += (logits.argmax(1) == y).sum().item()
            seen += len(y)
        if rank == 0:
            print(
                f"epoch {epoch}: accuracy {correct / seen:.3f}, {time.perf_counter() - start:.2f} s"
            )
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
