#!/usr/bin/env python3
"""TPE with trials at once, through the real binary: the parallel target of the constant liar.

For each function (default branin and hartmann6; also hartmann3, rosenbrock-5, ackley-5,
levy-5 and styblinski_tang-5, the 5-D ones on their standard boxes) and seed, runs the same
sweep twice with `sweep run`: once on 8 CPU slots (8 function trials at once; `steps` x
`step_ms` of sleep per trial makes them overlap, so each suggestion sees up to 7 trials still
running, with the reports they made so far) and once on 1 slot (one at a time). Each config is
    [sweep]    max_trials = 100, max_concurrent = SLOTS, seed = SEED
    [search]   algorithm = "tpe"
    [trial]    kind = "function"
    [function] name = F, steps = STEPS, step_ms = STEP_MS
    [executor] cpu_slots = SLOTS
over the function's standard box (uniform parameters x1..xn). The store (SQLite) is read back
for each run's best value and its duplicates: trials whose params equal an earlier trial's,
and among them those equal to a trial still running when they started (what the liar is for).

Printed per function: the median over seeds of the best value after the 100 trials, on 8
slots and on 1; the regret (best - the global minimum) and its log10, and how far apart the
two are as a share of the 1-slot log10 (the target: within 10%); the mean over seeds of log10
regret (steadier than the median when log10 regret is near 0); and the duplicates (target:
at most 0.5% of trials).

Usage:
    bench/tpe/tpe_parallel.py [--sweep PATH] [--seeds N] [--first-seed S] [--trials N]
                              [--slots N] [--steps N] [--step-ms MS] [--function NAME]...
                              [--keep DIR]
--sweep defaults to build-tpe/sweep/sweep, else build/sweep/sweep (from the checkout's root).
The default (seeds 0-19, 100 trials, 5 steps of 10 ms) takes about 5 minutes on 2 cores:
1-slot runs take 100 x 50 ms of sleep plus the trials' overhead, 8-slot ones an eighth of it.
--keep DIR keeps the configs and stores (else a temporary folder is removed).
The seed sets the sweep's seed, so seed k here and seed k in tpe_bench are different runs.
"""
import argparse
import json
import math
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

# The functions' boxes and minima, as executor/src/functions.cc gives them.
FUNCTIONS = {
    "branin": ([(-5.0, 10.0), (0.0, 15.0)], 0.397887357729738),
    "hartmann3": ([(0.0, 1.0)] * 3, -3.8627797873327),
    "hartmann6": ([(0.0, 1.0)] * 6, -3.32236801141551),
    "rosenbrock-5": ([(-5.0, 10.0)] * 5, 0.0),
    "ackley-5": ([(-32.768, 32.768)] * 5, 0.0),
    "levy-5": ([(-10.0, 10.0)] * 5, 0.0),
    "styblinski_tang-5": ([(-5.0, 5.0)] * 5, -39.16616570377142 * 5),
}


def config_text(function, seed, slots, trials, steps, step_ms):
    box, _ = FUNCTIONS[function]
    lines = [
        "[sweep]",
        f'name = "{function}-s{seed}-c{slots}"',
        f"max_trials = {trials}",
        f"max_concurrent = {slots}",
        f"seed = {seed}",
        "",
        "[search]",
        'algorithm = "tpe"',
        "",
        "[parameters]",
    ]
    for i, (lo, hi) in enumerate(box, 1):
        lines.append(f'x{i} = {{ distribution = "uniform", min = {lo}, max = {hi} }}')
    lines += [
        "",
        "[trial]",
        'kind = "function"',
        "",
        "[function]",
        f'name = "{function.split("-")[0]}"',
        f"steps = {steps}",
        f"step_ms = {step_ms}",
        "",
        "[executor]",
        f"cpu_slots = {slots}",
        "",
    ]
    return "\n".join(lines)


def run_once(sweep, folder, function, seed, slots, args):
    name = f"{function}-s{seed}-c{slots}"
    path = os.path.join(folder, name + ".toml")
    db = os.path.join(folder, name + ".db")
    with open(path, "w") as f:
        f.write(config_text(function, seed, slots, args.trials, args.steps, args.step_ms))
    if os.path.exists(db):
        os.remove(db)
    started = time.monotonic()
    done = subprocess.run([sweep, "run", path, "--db", db], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{name}: sweep run exited {done.returncode}\n{done.stdout}\n{done.stderr}")
    seconds = time.monotonic() - started
    con = sqlite3.connect(db)
    rows = con.execute(
        "SELECT t.number, t.params, t.status, t.objective, t.started, t.ended FROM trials t "
        "JOIN sweeps s ON s.id = t.sweep_id WHERE s.name = ? ORDER BY t.number",
        (name,),
    ).fetchall()
    con.close()
    best = math.inf
    seen = set()
    duplicates = running_duplicates = 0
    trials = []
    for number, params, status, objective, t0, t1 in rows:
        key = json.dumps(json.loads(params), sort_keys=True)
        trials.append((number, key, t0, t1))
        if status == "completed" and objective is not None:
            best = min(best, objective)
        if key in seen:
            duplicates += 1
        seen.add(key)
    # A trial equal to one that had started before it and had not yet ended when it started.
    for number, key, t0, _ in trials:
        if t0 is None:
            continue
        for other, other_key, s0, s1 in trials:
            if other != number and other_key == key and s0 is not None and s0 <= t0 and (
                s1 is None or s1 > t0
            ):
                running_duplicates += 1
                break
    return best, duplicates, running_duplicates, len(rows), seconds


def log_regret(regret):
    return math.log10(max(regret, 1e-12))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sweep", default=None)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--step-ms", type=int, default=10)
    parser.add_argument("--function", action="append", choices=sorted(FUNCTIONS))
    parser.add_argument("--keep", default=None)
    args = parser.parse_args()
    functions = args.function or ["branin", "hartmann6"]
    sweep = args.sweep
    if sweep is None:
        for candidate in ("build-tpe/sweep/sweep", "build/sweep/sweep"):
            if os.access(os.path.join(root, candidate), os.X_OK):
                sweep = os.path.join(root, candidate)
                break
    if sweep is None or not os.access(sweep, os.X_OK):
        sys.exit("no sweep binary: build one (--target sweep) or pass --sweep PATH")
    folder = args.keep or tempfile.mkdtemp(prefix="tpe_parallel_")
    os.makedirs(folder, exist_ok=True)
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    print(
        f"== TPE through {sweep}: {args.trials} trials, {args.steps} steps of {args.step_ms} ms, "
        f"{args.slots} slots against 1, seeds {seeds[0]}..{seeds[-1]}"
    )
    print(
        f"{'function':10} {'slots':>5} | {'median best':>12} {'regret':>10} {'log10':>7} | "
        f"{'mean log10':>10} | {'dups':>5} {'running':>7} {'trials':>6} | {'s/run':>6}"
    )
    try:
        for function in functions:
            minimum = FUNCTIONS[function][1]
            logs = {}
            for slots in (args.slots, 1):
                bests, dups, running, count, seconds = [], 0, 0, 0, 0.0
                for seed in seeds:
                    best, d, r, n, s = run_once(sweep, folder, function, seed, slots, args)
                    bests.append(best)
                    dups, running, count, seconds = dups + d, running + r, count + n, seconds + s
                median = statistics.median(bests)
                logs[slots] = log_regret(median - minimum)
                mean_log = statistics.mean(log_regret(b - minimum) for b in bests)
                print(
                    f"{function:10} {slots:5} | {median:12.6g} {median - minimum:10.4g} "
                    f"{logs[slots]:7.3f} | {mean_log:10.3f} | {dups:5} {running:7} {count:6} | "
                    f"{seconds / len(seeds):6.1f}",
                    flush=True,
                )
            one, many = logs[1], logs[args.slots]
            gap = 100 * abs(many - one) / max(1e-12, abs(one))
            side = "better" if many < one else "worse"
            print(
                f"{function:10} {'':5} | log10 regret of the median best: {many:.3f} on "
                f"{args.slots} slots, {one:.3f} on 1: {gap:.1f}% apart, {args.slots} slots "
                f"{side} (target: within 10%)",
                flush=True,
            )
    finally:
        if args.keep is None:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
