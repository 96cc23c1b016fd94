#!/usr/bin/env python3
"""PyTorch at its best training the trainer's CNN (or MLP) on one GPU, for their figures' baseline.

The model is the trainer's `model = "cnn"`: per stage two conv3x3 (padding 1, no bias) ->
BatchNorm -> ReLU, then maxpool 2x2; flatten; a hidden linear layer with ReLU (--fc, 0: none);
a linear layer to 10 classes. With --mlp H1,H2,..., the trainer's `model = "mlp"` instead:
Linear/ReLU layers of those widths over the 784 pixels, then 10 classes. SGD with momentum 0.9,
nesterov, weight decay 5e-4, cross-entropy.
Every variant uses what makes PyTorch fastest here:
  - channels_last tensors, bf16 autocast (fp32 master weights), TF32 for what stays fp32;
  - the training set held on the GPU, batches gathered there, crop (padding 2) and flip done on
    the GPU for the whole batch at once (--augment 0: neither);
  - a fused (or multi-tensor) optimizer.
Variants (--variants, comma separated):
  eager           plain eager steps
  graph           forward, backward and optimizer captured once with torch.cuda.graph and
                  replayed (the batch copied into the captured input first)
  compile         torch.compile(model), default mode
  max-autotune    torch.compile(model, mode="max-autotune")
Each variant runs --warmup steps (compilation and capture included, timed apart), then --steps
timed steps. Prints one line per variant (samples/s, ms per step, set-up seconds) and the best.
With --device cpu it runs eager alone (a smoke test of the script).

Usage: torch_cnn_gpu.py --data DIR [--channels 32,64] [--fc 256] [--mlp H1,H2] [--augment 1]
                        [--batch 256]
                        [--variants eager,graph,compile,max-autotune] [--warmup 20] [--steps 200]
                        [--device cuda|cpu]
"""
import argparse
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# The IDX readers of the MLP twin beside this file (its folder is on sys.path when run).
from torch_mlp_gpu import find, idx


def make_mlp(hidden):
    layers, width = [nn.Flatten()], 784
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    layers.append(nn.Linear(width, 10))
    return nn.Sequential(*layers)


def make_model(channels, fc):
    layers, cin, side = [], 1, 28
    for c in channels:
        layers += [nn.Conv2d(cin, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU(),
                   nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU(),
                   nn.MaxPool2d(2)]
        cin, side = c, side // 2
    layers.append(nn.Flatten())
    width = cin * side * side
    if fc:
        layers += [nn.Linear(width, fc), nn.ReLU()]
        width = fc
    layers.append(nn.Linear(width, 10))
    return nn.Sequential(*layers)


def make_optimizer(model, cuda):
    kw = dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4)
    if cuda:
        try:
            return torch.optim.SGD(model.parameters(), fused=True, **kw), "fused"
        except (TypeError, RuntimeError):
            pass
    try:
        return torch.optim.SGD(model.parameters(), foreach=True, **kw), "foreach"
    except TypeError:
        return torch.optim.SGD(model.parameters(), **kw), "plain"


class Batches:
    """Batches of the GPU-held set: a per-epoch permutation, crop from the image padded by 2
    and a horizontal flip, per sample, for the whole batch in a few kernels."""

    def __init__(self, x, y, batch, augment=True):
        self.x, self.y, self.batch = x, y, batch  # x: [N, 28, 28] uint8 on the device
        self.augment = augment
        self.n = x.shape[0]
        self.perm, self.at = None, self.n
        self.base = torch.arange(28, device=x.device)

    def next(self):
        if self.at + self.batch > self.n:
            self.perm, self.at = torch.randperm(self.n, device=self.x.device), 0
        j = self.perm[self.at:self.at + self.batch]
        self.at += self.batch
        if not self.augment:
            img = self.x[j].float().div_(255).unsqueeze(1)
            return img.contiguous(memory_format=torch.channels_last), self.y[j]
        img = F.pad(self.x[j].float().div_(255), (2, 2, 2, 2))  # [B, 32, 32]
        b = j.shape[0]
        dy = torch.randint(0, 5, (b, 1), device=j.device)
        dx = torch.randint(0, 5, (b, 1), device=j.device)
        flip = torch.rand(b, 1, device=j.device) < 0.5
        rows = dy + self.base
        cols = torch.where(flip, dx + 27 - self.base, dx + self.base)
        out = img[torch.arange(b, device=j.device)[:, None, None], rows[:, :, None],
                  cols[:, None, :]]
        return out.unsqueeze(1).contiguous(memory_format=torch.channels_last), self.y[j]


def run_variant(name, a, xtr, ytr, dev):
    cuda = dev.type == "cuda"
    torch.manual_seed(0)
    model = make_mlp(a.mlp) if a.mlp else make_model(a.channels, a.fc)
    model = model.to(dev).to(memory_format=torch.channels_last)
    opt, opt_kind = make_optimizer(model, cuda)
    batches = Batches(xtr, ytr, a.batch, augment=a.augment != 0)
    amp = dict(device_type=dev.type, dtype=torch.bfloat16)

    compiled = name in ("compile", "max-autotune")
    # max-autotune replays its own CUDA graphs, whose outputs the next replay overwrites: each
    # step must say that it starts a new iteration (torch 2.1 and later).
    mark = getattr(getattr(torch, "compiler", None), "cudagraph_mark_step_begin", None)

    def step_fn(net, x, y):
        if compiled and mark is not None:
            mark()
        with torch.autocast(**amp):
            loss = F.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=False)
        return loss

    t0 = time.perf_counter()
    if compiled:
        if not hasattr(torch, "compile"):
            return None, "this torch has no torch.compile"
        net = torch.compile(model, mode="max-autotune" if name == "max-autotune" else None)
    else:
        net = model
    graph = None
    if name == "graph":
        if not cuda:
            return None, "CUDA graphs need a GPU"
        sx, sy = batches.next()
        static_x, static_y = sx.clone(), sy.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):  # warm the allocator and the autotuners outside the capture
                step_fn(net, static_x, static_y)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_loss = step_fn(net, static_x, static_y)

    def one_step():
        x, y = batches.next()
        if graph is not None:
            static_x.copy_(x)
            static_y.copy_(y)
            graph.replay()
            return static_loss
        return step_fn(net, x, y)

    for _ in range(a.warmup):
        loss = one_step()
    if cuda:
        torch.cuda.synchronize()
    setup_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    for _ in range(a.steps):
        loss = one_step()
    if cuda:
        torch.cuda.synchronize()
    train_s = time.perf_counter() - t1
    if not torch.isfinite(loss).item():
        return None, "the loss is not finite"
    return {"samples_per_s": a.steps * a.batch / train_s, "ms_per_step": 1e3 * train_s / a.steps,
            "setup_s": setup_s, "optimizer": opt_kind, "loss": float(loss)}, ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--channels", default="32,64")
    ap.add_argument("--fc", type=int, default=256)
    ap.add_argument("--mlp", default="", help="hidden widths: the MLP instead of the CNN")
    ap.add_argument("--augment", type=int, choices=[0, 1], default=1)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--variants", default="eager,graph,compile,max-autotune")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    a = ap.parse_args()
    a.channels = [int(c) for c in a.channels.split(",")]
    a.mlp = [int(h) for h in a.mlp.split(",")] if a.mlp else []

    dev = torch.device(a.device)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        torch.backends.cudnn.benchmark = True
    xtr = torch.from_numpy(idx(find(a.data, "train-images-idx3-ubyte")).copy()).to(dev)
    ytr = torch.from_numpy(idx(find(a.data, "train-labels-idx1-ubyte")).astype(np.int64)).to(dev)
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    model = f"mlp={a.mlp}" if a.mlp else f"channels={a.channels} fc={a.fc}"
    augment = "GPU crop+flip" if a.augment else "no augmentation"
    print(f"torch {torch.__version__} on {name}: {model} batch={a.batch} bf16 autocast, "
          f"channels_last, set on the device, {augment}")
    best = None
    for v in a.variants.split(","):
        if dev.type == "cpu" and v != "eager":
            print(f"variant={v} skipped: eager only on the CPU")
            continue
        try:
            r, why = run_variant(v, a, xtr, ytr, dev)
        except Exception as e:  # a variant this torch or GPU cannot run is reported, not fatal
            r, why = None, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        if r is None:
            print(f"variant={v} skipped: {why}")
            continue
        print(f"variant={v} samples_per_s={r['samples_per_s']:.0f} "
              f"ms_per_step={r['ms_per_step']:.3f} setup_s={r['setup_s']:.1f} "
              f"optimizer={r['optimizer']} loss={r['loss']:.3f}")
        if best is None or r["samples_per_s"] > best[1]["samples_per_s"]:
            best = (v, r)
    if best is not None:
        print(f"best={best[0]} samples_per_s={best[1]['samples_per_s']:.0f}")


if __name__ == "__main__":
    main()
