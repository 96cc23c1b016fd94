#!/usr/bin/env python3
"""A stand-in for a user's training script, run by configs/command_example.toml.

It shows the whole contract of a command trial:
  - hyperparameters arrive as arguments (the config's "--lr={lr}" template) and, all of them,
    as JSON in $SWEEP_PARAMS;
  - each epoch it prints one line `sweep-report {...}` on stdout (early stopping reads these);
  - it keeps its state in $SWEEP_TRIAL_DIR, so a trial that is run again (its agent was lost,
    or the sweep was resumed) continues from its last epoch;
  - it ends cleanly on SIGTERM (sweep sends it when early stopping prunes the trial).
The "model" is a noisy learning curve whose ceiling depends on the hyperparameters, so the
example runs in seconds on any machine.
"""
import argparse
import json
import math
import os
import random
import signal
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, required=True)
parser.add_argument("--momentum", type=float, default=0.0)
parser.add_argument("--layers", type=int, default=2)
parser.add_argument("--epochs", type=int, default=9)
parser.add_argument("--epoch-seconds", type=float, default=0.05)
args = parser.parse_args()

stopping = False


def on_term(signum, frame):
    global stopping
    stopping = True


signal.signal(signal.SIGTERM, on_term)

trial_dir = os.environ.get("SWEEP_TRIAL_DIR", ".")
state_path = os.path.join(trial_dir, "state.json")
seed = int(os.environ.get("SWEEP_SEED", "0"))
state = {"epoch": 0}
if os.path.exists(state_path):
    with open(state_path) as f:
        state = json.load(f)
    print(f"resuming from epoch {state['epoch']}", file=sys.stderr)

# Best around lr = 0.03, momentum = 0.9, 3 layers.
ceiling = 0.92 - 0.08 * (math.log10(args.lr) - math.log10(0.03)) ** 2
ceiling -= 0.3 * (args.momentum - 0.9) ** 2 + 0.01 * abs(args.layers - 3)
rng = random.Random(seed)
for epoch in range(state["epoch"] + 1, args.epochs + 1):
    if stopping:
        print(f"stopped at epoch {epoch - 1}", file=sys.stderr)
        sys.exit(0)
    time.sleep(args.epoch_seconds)
    val_acc = ceiling * (1 - math.exp(-0.6 * epoch)) + rng.gauss(0, 0.003)
    val_loss = -math.log(max(val_acc, 1e-3))
    print("sweep-report " + json.dumps({"epoch": epoch, "val_acc": val_acc, "val_loss": val_loss}))
    state["epoch"] = epoch
    with open(state_path + ".tmp", "w") as f:
        json.dump(state, f)
    os.replace(state_path + ".tmp", state_path)
