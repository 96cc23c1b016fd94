#!/usr/bin/env python3
"""A small PyTorch training script, run by configs/tutorial.toml (docs/tutorial.md).

An MLP on a subset of Fashion-MNIST, so that one trial takes seconds on one CPU core.
What makes it a command trial is three things:
  - it takes its hyperparameters as arguments (the config's "--lr={lr}" template);
  - it prints one `sweep-report {...}` line on stdout per epoch;
  - it keeps a checkpoint in $SWEEP_TRIAL_DIR, so a trial run again goes on from its last epoch.
It also runs on its own: `python3 configs/tutorial/train.py --lr 0.05 --epochs 2`.
"""
import argparse
import gzip
import json
import os

import numpy as np
import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, default=0.1)
parser.add_argument("--hidden", type=int, default=128)
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--epochs", type=int, default=6)
parser.add_argument("--train-samples", type=int, default=10000)
parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
args = parser.parse_args()


def read_idx(name, offset):
    with gzip.open(os.path.join(args.data, name)) as f:
        return np.frombuffer(f.read(), np.uint8, offset=offset)


images = read_idx("train-images-idx3-ubyte.gz", 16).reshape(-1, 784)
labels = read_idx("train-labels-idx1-ubyte.gz", 8)
# A fixed split, the same in every trial: trials differ only by their hyperparameters.
order = np.random.default_rng(0).permutation(len(labels))
train_rows, val_rows = order[:args.train_samples], order[-5000:]


def tensors(rows):
    return (torch.from_numpy(images[rows].astype(np.float32) / 255),
            torch.from_numpy(labels[rows].astype(np.int64)))


x_train, y_train = tensors(train_rows)
x_val, y_val = tensors(val_rows)

# sweep gives each trial its own seed; on its own the script uses 0.
torch.manual_seed(int(os.environ.get("SWEEP_SEED", "0")))
model = nn.Sequential(nn.Linear(784, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

# A trial run again (the sweep was resumed) finds its checkpoint and goes on from it.
checkpoint = os.path.join(os.environ.get("SWEEP_TRIAL_DIR", "."), "checkpoint.pt")
first_epoch = 1
if "SWEEP_TRIAL_DIR" in os.environ and os.path.exists(checkpoint):
    state = torch.load(checkpoint)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    first_epoch = state["epoch"] + 1

for epoch in range(first_epoch, args.epochs + 1):
    model.train()
    total = 0.0
    for rows in torch.randperm(len(y_train)).split(args.batch_size):
        loss = nn.functional.cross_entropy(model(x_train[rows]), y_train[rows])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total += loss.item() * len(rows)
    model.eval()
    with torch.no_grad():
        logits = model(x_val)
        val_loss = nn.functional.cross_entropy(logits, y_val).item()
        val_acc = (logits.argmax(1) == y_val).float().mean().item()
    if "SWEEP_TRIAL_DIR" in os.environ:
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "epoch": epoch}, checkpoint + ".tmp")
        os.replace(checkpoint + ".tmp", checkpoint)  # never a half-written checkpoint
    # The one line sweep reads: every number but "epoch" is a metric.
    print("sweep-report " + json.dumps({"epoch": epoch,
                                        "train_loss": round(total / len(y_train), 4),
                                        "val_loss": round(val_loss, 4),
                                        "val_acc": round(val_acc, 4)}))
