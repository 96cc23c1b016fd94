#!/usr/bin/env python3
"""Compares two runs of one sweep (same config and seed, so the same trials with the same
parameters): one trained on the GPU, one on the CPU, each given as `sweep trials NAME --json`.

Same ranking quality means: every trial completed in both, each trial number has the same
parameters in both, and
  - the best values differ by at most --best-tolerance;
  - the trial the GPU run picks scores, on the CPU, within --best-tolerance of the CPU's best
    (picking by the GPU's figures loses at most that), and the other way round;
  - the rank correlation (Spearman) of the metric over the trials is at least --min-spearman.
Where the pick stands in the other run's order is printed, not tested: trials a few thousandths
apart (a few dozen validation images) swap places between TF32 and exact fp32 training without
the sweep finding anything worse.

Usage: compare_rankings.py GPU.json CPU.json [--metric val_acc] [--mode max]
       [--best-tolerance 0.01] [--min-spearman 0.5] [--expect-gpu]
--expect-gpu: the first run's trials must also have been placed on GPUs.
Exit status 0 when the rankings agree as above, 1 when not, 2 on bad input.
"""
import argparse
import json
import sys


def ranks(values):
    """Average ranks (1 = smallest), ties sharing the mean of their positions."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    r = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            r[order[k]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return r


def spearman(a, b):
    ra, rb = ranks(a), ranks(b)
    n = len(a)
    ma, mb = sum(ra) / n, sum(rb) / n
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    va = sum((x - ma) ** 2 for x in ra)
    vb = sum((y - mb) ** 2 for y in rb)
    if va == 0 or vb == 0:
        return float("nan")
    return cov / (va * vb) ** 0.5


def load(path, metric):
    try:
        with open(path) as f:
            trials = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"compare_rankings: {path}: {e}")
    if not isinstance(trials, list):
        sys.exit(f"compare_rankings: {path}: not a `sweep trials --json` array")
    out = {}
    for t in trials:
        out[t["trial"]] = (t["status"], t["params"], t.get("metrics", {}).get(metric),
                           t.get("placement") or "")
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("gpu")
    p.add_argument("cpu")
    p.add_argument("--metric", default="val_acc")
    p.add_argument("--mode", choices=["max", "min"], default="max")
    p.add_argument("--best-tolerance", type=float, default=0.01)
    p.add_argument("--min-spearman", type=float, default=0.5)
    p.add_argument("--expect-gpu", action="store_true")
    a = p.parse_args()
    gpu, cpu = load(a.gpu, a.metric), load(a.cpu, a.metric)
    problems = []
    for name, run in (("first", gpu), ("second", cpu)):
        places = sorted({t[3] for t in run.values()})
        print(f"{name} run placed its trials on: {', '.join(places)}")
    if a.expect_gpu:
        for n, t in sorted(gpu.items()):
            if "gpu" not in t[3]:
                problems.append(f"trial {n} of the gpu run was placed on {t[3] or 'nothing'}")
    if sorted(gpu) != sorted(cpu):
        problems.append(f"trial numbers differ: gpu {sorted(gpu)}, cpu {sorted(cpu)}")
    common = sorted(set(gpu) & set(cpu))
    for n in common:
        for name, run in (("gpu", gpu), ("cpu", cpu)):
            if run[n][0] != "completed" or run[n][2] is None:
                problems.append(f"trial {n} on the {name}: {run[n][0]}, {a.metric} {run[n][2]}")
        if gpu[n][1] != cpu[n][1]:
            problems.append(f"trial {n}: parameters differ: {gpu[n][1]} vs {cpu[n][1]}")
    done = [n for n in common if gpu[n][2] is not None and cpu[n][2] is not None]
    if len(done) < 2:
        print("compare_rankings: fewer than two trials with the metric in both runs")
        for line in problems:
            print("  " + line)
        return 1
    sign = 1 if a.mode == "max" else -1
    print(f"trial  gpu {a.metric:<10} cpu {a.metric:<10} difference")
    for n in done:
        g, c = gpu[n][2], cpu[n][2]
        print(f"{n:<6} {g:<14.6g} {c:<14.6g} {g - c:+.4f}")
    best_gpu = max(done, key=lambda n: sign * gpu[n][2])
    best_cpu = max(done, key=lambda n: sign * cpu[n][2])
    cpu_order = sorted(done, key=lambda n: -sign * cpu[n][2])
    gpu_order = sorted(done, key=lambda n: -sign * gpu[n][2])
    place = cpu_order.index(best_gpu) + 1
    place_back = gpu_order.index(best_cpu) + 1
    # What picking by one run's figures loses, judged by the other's.
    regret_cpu = sign * (cpu[best_cpu][2] - cpu[best_gpu][2])
    regret_gpu = sign * (gpu[best_gpu][2] - gpu[best_cpu][2])
    rho = spearman([gpu[n][2] for n in done], [cpu[n][2] for n in done])
    gap = sign * (gpu[best_gpu][2] - cpu[best_cpu][2])
    print(f"best on the gpu: trial {best_gpu}, {a.metric} {gpu[best_gpu][2]:.6g} "
          f"(place {place} of {len(done)} on the cpu, {regret_cpu:.4f} below the cpu's best "
          f"there; tolerance {a.best_tolerance})")
    print(f"best on the cpu: trial {best_cpu}, {a.metric} {cpu[best_cpu][2]:.6g} "
          f"(place {place_back} of {len(done)} on the gpu, {regret_gpu:.4f} below the gpu's "
          f"best there); gpu best - cpu best = {gap:+.4f} (tolerance -{a.best_tolerance})")
    print(f"Spearman rank correlation over {len(done)} trials: {rho:.3f} "
          f"(at least {a.min_spearman})")
    if gap < -a.best_tolerance:
        problems.append(f"the gpu's best is {-gap:.4f} worse than the cpu's")
    if regret_cpu > a.best_tolerance:
        problems.append(f"the gpu's pick, trial {best_gpu}, is {regret_cpu:.4f} below the best "
                        f"on the cpu")
    if regret_gpu > a.best_tolerance:
        problems.append(f"the cpu's pick, trial {best_cpu}, is {regret_gpu:.4f} below the best "
                        f"on the gpu")
    if not rho >= a.min_spearman:
        problems.append(f"rank correlation {rho:.3f} is under {a.min_spearman}")
    for line in problems:
        print("MISMATCH: " + line)
    print("same ranking quality: " + ("yes" if not problems else "no"))
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
