#!/usr/bin/env python3
"""The PyTorch GPU twin of the embedded trainer's Fashion-MNIST MLP (the CPU peer script on a GPU).

Same model (Linear/ReLU stack, 10 classes), SGD momentum 0.9, cross-entropy, batches drawn from
a per-epoch permutation with the last partial batch dropped. fp32 runs with TF32 matmuls (what
the trainer does by default); bf16 runs under torch.autocast (bf16 matmul inputs, fp32 master
weights, as the trainer's bf16). Two input modes:
  host      each batch's uint8 pixels gathered on the CPU straight into one of two
            preallocated pinned buffers, sent with a non_blocking copy and scaled by 1/255 on
            the GPU (the trainer's streamed path; a buffer is refilled only after its copy has
            finished)
  resident  the whole dataset moved to the GPU once; batches indexed there (no copies)
Prints samples_per_s over training steps only (the first epoch is warm-up and not counted when
there are several) and the test accuracy.

Usage: torch_mlp_gpu.py --data DIR [--epochs N] [--batch B] [--hidden 256,128] [--lr 0.05]
                        [--precision fp32|bf16] [--input host|resident] [--device 0]
"""
import argparse
import gzip
import os
import struct
import time

import numpy as np
import torch


def idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        b = f.read()
    dims = b[3]
    shape = struct.unpack(">" + "I" * dims, b[4:4 + 4 * dims])
    return np.frombuffer(b, np.uint8, offset=4 + 4 * dims).reshape(shape)


def find(data, name):
    for candidate in (name + ".gz", name):
        p = os.path.join(data, candidate)
        if os.path.exists(p):
            return p
    raise SystemExit(f"{data}: no {name}[.gz]")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--hidden", default="256,128")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--input", choices=["host", "resident"], default="host")
    ap.add_argument("--device", type=int, default=0)
    a = ap.parse_args()

    dev = torch.device("cuda", a.device)
    # TF32 for fp32 matmuls, as the trainer; the newer switch where this torch has it.
    # (an older torch refuses the unknown name with an AssertionError).
    try:
        torch.backends.cuda.matmul.fp32_precision = "tf32"
    except (AttributeError, AssertionError):
        torch.backends.cuda.matmul.allow_tf32 = True
    torch.manual_seed(0)
    pixels = torch.tensor(idx(find(a.data, "train-images-idx3-ubyte")).reshape(-1, 784),
                          dtype=torch.uint8)
    xtr = pixels.to(torch.float32) / 255
    ytr = torch.tensor(idx(find(a.data, "train-labels-idx1-ubyte")), dtype=torch.long)
    xte = torch.tensor(idx(find(a.data, "t10k-images-idx3-ubyte")).reshape(-1, 784),
                       dtype=torch.float32) / 255
    yte = torch.tensor(idx(find(a.data, "t10k-labels-idx1-ubyte")), dtype=torch.long)
    if a.input == "resident":
        xtr, ytr = xtr.to(dev), ytr.to(dev)
    else:
        pinned_x = [torch.empty((a.batch, 784), dtype=torch.uint8, pin_memory=True)
                    for _ in range(2)]
        pinned_y = [torch.empty((a.batch,), dtype=torch.long, pin_memory=True) for _ in range(2)]
        copied = [None, None]

    hidden = [int(h) for h in a.hidden.split(",")]
    layers, d = [], 784
    for h in hidden:
        layers += [torch.nn.Linear(d, h), torch.nn.ReLU()]
        d = h
    model = torch.nn.Sequential(*layers, torch.nn.Linear(d, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    lossf = torch.nn.CrossEntropyLoss()
    n = xtr.shape[0]
    train_s, seen = 0.0, 0
    for ep in range(a.epochs):
        perm = torch.randperm(n, device=xtr.device)
        torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        steps = 0
        for i in range(0, n - a.batch + 1, a.batch):
            rows = perm[i:i + a.batch]
            if a.input == "resident":
                xb, yb = xtr[rows], ytr[rows]
            else:
                k = steps % 2
                if copied[k] is not None:
                    copied[k].synchronize()
                torch.index_select(pixels, 0, rows, out=pinned_x[k])
                torch.index_select(ytr, 0, rows, out=pinned_y[k])
                xb = pinned_x[k].to(dev, non_blocking=True).to(torch.float32) / 255
                yb = pinned_y[k].to(dev, non_blocking=True)
                copied[k] = torch.cuda.Event()
                copied[k].record()
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
                loss = lossf(model(xb), yb)
            loss.backward()
            opt.step()
            steps += 1
        torch.cuda.synchronize(dev)
        if ep > 0 or a.epochs == 1:
            train_s += time.perf_counter() - t0
            seen += steps * a.batch
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16,
                                         enabled=a.precision == "bf16"):
        acc = (model(xte.to(dev)).argmax(1).cpu() == yte).float().mean().item()
    print(f"torch {torch.__version__} cuda {torch.version.cuda} device {torch.cuda.get_device_name(dev)} "
          f"epochs={a.epochs} batch={a.batch} hidden={hidden} precision={a.precision} input={a.input}")
    print(f"test_accuracy={acc:.4f}")
    print(f"samples_per_s={seen / train_s:.0f}")


if __name__ == "__main__":
    main()
