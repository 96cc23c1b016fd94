#!/usr/bin/python3
"""The PyTorch side of cnn_test.cc's parity test: builds the model a sweep layer description
names, with the weights and batches given (our layout: NHWC, conv weights [out, k, k, in],
flatten in H W C order), trains it with SGD and momentum, and writes the per-step losses, the
final weights and running statistics (in our layout again) and the evaluation logits.

Usage: torch_parity.py IN.json OUT.json"""
import json
import sys

import torch
import torch.nn.functional as F

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)
src = json.load(open(sys.argv[1]))
model, layout = src["model"], src["layout"]
flat = torch.tensor(src["params"], dtype=torch.float64)
layers = model["layers"]
c0, h0, w0 = model["input"]


def torch_weight(i):
    """Layer i's weight as a PyTorch parameter (NCHW layout), and how to write it back."""
    l, at = layers[i], layout[i]
    c, h, w = at["in"]
    if l["kind"] == "linear" and l["input"] >= 0 and layers[l["input"]]["kind"] == "flatten":
        c, h, w = layout[l["input"]]["in"]  # our flatten is H W C, PyTorch's C H W
    start = at["weight"]
    if l["kind"] == "conv2d":
        k, out = l["kernel"], l["out"]
        t = flat[start:start + out * k * k * c].reshape(out, k, k, c).permute(0, 3, 1, 2)
        back = lambda p: p.permute(0, 2, 3, 1).reshape(-1)
    elif l["kind"] == "linear":
        out = l["out"]
        t = flat[start:start + out * c * h * w].reshape(out, h, w, c).permute(0, 3, 1, 2)
        t = t.reshape(out, c * h * w)
        back = lambda p, out=out, c=c, h=h, w=w: p.reshape(out, c, h, w).permute(0, 2, 3, 1).reshape(-1)
    else:  # batch norm's gamma
        t = flat[start:start + c]
        back = lambda p: p.reshape(-1)
    return torch.nn.Parameter(t.clone().float().contiguous()), back


params, writers, biases, stats = {}, [], {}, {}
for i, l in enumerate(layers):
    at = layout[i]
    if at["weight"] >= 0:
        p, back = torch_weight(i)
        params[i] = p
        writers.append((at["weight"], p, back))
    if at["bias"] >= 0:
        n = l["out"] if l["kind"] != "batch_norm" else at["in"][0]
        b = torch.nn.Parameter(flat[at["bias"]:at["bias"] + n].clone().float())
        biases[i] = b
        writers.append((at["bias"], b, lambda p: p.reshape(-1)))
    if l["kind"] == "batch_norm":
        c = at["in"][0]
        stats[i] = (torch.zeros(c), torch.ones(c))


def forward(x, train):
    ys = []
    inp = lambda j: x if j < 0 else ys[j]
    for i, l in enumerate(layers):
        a = inp(l["input"])
        k = l["kind"]
        if k == "conv2d":
            y = F.conv2d(a, params[i], biases.get(i), stride=l["stride"], padding=l["pad"])
        elif k == "batch_norm":
            rm, rv = stats[i]
            y = F.batch_norm(a, rm, rv, params[i], biases[i], train, l["momentum"], l["eps"])
        elif k == "activation":
            y = {"relu": F.relu, "tanh": torch.tanh,
                 "gelu": lambda t: F.gelu(t, approximate="tanh")}[l["act"]](a)
        elif k == "max_pool":
            y = F.max_pool2d(a, l["kernel"], l["stride"])
        elif k == "avg_pool":
            y = F.avg_pool2d(a, l["kernel"], l["stride"])
        elif k == "global_avg_pool":
            y = a.mean(dim=(2, 3), keepdim=True)
        elif k == "flatten":
            y = a.flatten(1)
        elif k == "linear":
            y = F.linear(a.flatten(1), params[i], biases.get(i))
        elif k == "add":
            y = a + inp(l["shortcut"])
        else:
            raise SystemExit("unsupported layer " + k)
        ys.append(y)
    return ys[-1].flatten(1)


def batch(j):
    x = torch.tensor(src["x"][j], dtype=torch.float32).reshape(-1, h0, w0, c0)
    return x.permute(0, 3, 1, 2).contiguous(), torch.tensor(src["y"][j], dtype=torch.long)


all_params = list(params.values()) + list(biases.values())
opt = torch.optim.SGD(all_params, lr=src["lr"], momentum=src["momentum"],
                      weight_decay=src["weight_decay"])
losses = []
for j in range(len(src["x"]) - 1):
    x, y = batch(j)
    opt.zero_grad()
    loss = F.cross_entropy(forward(x, True), y)
    loss.backward()
    opt.step()
    losses.append(loss.item())
out_flat = flat.clone().float()
for start, p, back in writers:
    v = back(p.detach())
    out_flat[start:start + v.numel()] = v
running = []
for i in sorted(stats):
    running += stats[i][0].tolist() + stats[i][1].tolist()
with torch.no_grad():
    x, _ = batch(len(src["x"]) - 1)
    logits = forward(x, False)
json.dump({"losses": losses, "params": out_flat.tolist(), "stats": running,
           "eval_logits": logits.reshape(-1).tolist()}, open(sys.argv[2], "w"))
