#!/usr/bin/env python3
"""Checks the `sweep trials NAME --json` of bench/gpu/run_on_gpu.sh's failure sweep, AdamW: a
grid of hidden [256] or [74000, 74000, 74000] (1.1e10 parameters: 175 GB of weights, gradients
and AdamW's two buffers, more than an H100 or H200 holds, while the host's check of its own
memory, 88 GB for a GPU trial, passes on a machine with 128 GiB) by lr 0.001 or 1e30 (the
weights overflow at once). Every small model at lr 0.001 must complete with a val_acc above
0.7; every small one at lr 1e30 must fail saying it diverged; every large one must fail saying it
does not fit in the GPU's memory (the backend's check before allocating), or else with CUDA's
out-of-memory error and the statement's file and line.
Usage: check_gpu_failures.py TRIALS.json. Exit status 0 when all hold, 1 when not.
"""
import json
import re
import sys


def main():
    with open(sys.argv[1]) as f:
        trials = json.load(f)
    problems = []
    seen = set()
    for t in trials:
        p = t["params"]
        big = max(p["hidden"]) > 10000
        diverges = p["lr"] > 100
        error = t.get("error", "")
        val = t.get("metrics", {}).get("val_acc")
        print(f"trial {t['trial']}: hidden {p['hidden']} lr {p['lr']}: {t['status']}"
              f"{', val_acc %.4f' % val if val is not None else ''}"
              f"{', error: ' + error[:300] if error else ''}")
        if big:
            seen.add("oom")
            refused = re.search(r"does not fit in GPU \d+'s memory", error)
            oom = re.search(r"out of memory", error) and re.search(r"\.(cc|cu|h):\d+", error)
            if t["status"] != "failed" or not (refused or oom):
                problems.append(f"trial {t['trial']}: want failed, not fitting in the GPU's "
                                f"memory")
        elif diverges:
            seen.add("nan")
            if t["status"] != "failed" or "diverged" not in error:
                problems.append(f"trial {t['trial']}: want failed, diverged")
        else:
            seen.add("ok")
            if t["status"] != "completed" or val is None or val < 0.7:
                problems.append(f"trial {t['trial']}: want completed with val_acc above 0.7")
    if seen != {"oom", "nan", "ok"}:
        problems.append(f"the sweep lacks some cases: saw {sorted(seen)}")
    for line in problems:
        print("MISMATCH: " + line)
    print("GPU failures reported as expected: " + ("yes" if not problems else "no"))
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
