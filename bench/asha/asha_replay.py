#!/usr/bin/env python3
"""Replays the random-search arms of asha_trainer_bench through two ASHA rules.

Each random arm ran every trial to the last epoch and stored its val_acc at every epoch, so
its learning curves say what early stopping would have spent and found on the same trials.
The trials start in number order on SLOTS slots; an epoch costs one unit of time.

- stop: sweep's rule. A trial at a rung goes on when it is among the top floor(n/eta) of the
  n trials recorded there so far (at least the best); otherwise it stops for good. With
  --bootstrap B (early_stopping.bootstrap_count), the first B trials at each rung stop there.
- pause: the ASHA paper's. A trial at a rung goes on only when it is in the top floor(n/eta);
  otherwise it pauses. A free slot first resumes a paused trial that has since entered the top
  floor(n/eta) of its rung (highest rung first), then starts a new trial.

Usage: asha_trainer_bench --space quickstart --epochs 9 --seeds 1,2,3 --keep DIR
       asha_replay.py DIR/bench.db [--eta 3] [--min-resource 1] [--slots 2] [--bootstrap B]
"""
import argparse
import heapq
import json
import sqlite3


def curves(db, sweep):
    (sweep_id,) = db.execute("SELECT id FROM sweeps WHERE name = ?", (sweep,)).fetchone()
    out = {}
    rows = db.execute(
        "SELECT trial, epoch, metrics FROM reports WHERE sweep_id = ? ORDER BY trial, epoch",
        (sweep_id,))
    for trial, epoch, metrics in rows:
        value = json.loads(metrics).get("val_acc")
        if value is not None:
            out.setdefault(trial, {})[int(round(epoch))] = value
    return [out[t] for t in sorted(out)]


def cutoff(values, k):
    return sorted(values, reverse=True)[k - 1]


def replay(trials, rule, rungs, last, eta, slots, bootstrap=0):
    recorded = {r: [] for r in rungs}  # (trial, value) in arrival order
    paused = {r: set() for r in rungs}
    passed = {r: set() for r in rungs}
    started = 0
    epochs = 0
    best = None
    events = []  # (time, trial, epochs done)

    def next_job():
        nonlocal started
        if rule == "pause":
            for r in reversed(rungs):
                k = len(recorded[r]) // eta
                if k == 0:
                    continue
                cut = cutoff([v for _, v in recorded[r]], k)
                for trial, value in recorded[r]:
                    if value >= cut and trial in paused[r]:
                        paused[r].discard(trial)
                        passed[r].add(trial)
                        return trial, r
        if started < len(trials):
            started += 1
            return started - 1, 0
        return None

    for _ in range(slots):
        job = next_job()
        if job:
            heapq.heappush(events, (0, job[0], job[1]))
    while events:
        now, trial, done = heapq.heappop(events)
        done += 1
        now += 1
        epochs += 1
        value = trials[trial][done]
        go = True
        if done in rungs and trial not in passed[done]:
            recorded[done].append((trial, value))
            values = [v for _, v in recorded[done]]
            if rule == "stop":
                go = value >= cutoff(values, max(1, len(values) // eta)) and \
                    len(values) > bootstrap
            else:
                k = len(values) // eta
                go = k > 0 and value >= cutoff(values, k)
                (passed if go else paused)[done].add(trial)
        if done == last:
            best = value if best is None else max(best, value)
            go = False
        if go:
            heapq.heappush(events, (now, trial, done))
        else:
            job = next_job()
            if job:
                heapq.heappush(events, (now, job[0], job[1]))
    return epochs, best


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("db")
    parser.add_argument("--eta", type=int, default=3)
    parser.add_argument("--min-resource", type=int, default=1)
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--bootstrap", type=int, default=0)
    args = parser.parse_args()
    # Read-only: a wrong path fails here instead of leaving an empty database behind.
    db = sqlite3.connect(f"file:{args.db}?mode=ro", uri=True)
    names = [n for (n,) in db.execute("SELECT name FROM sweeps WHERE name LIKE 'random%' "
                                      "ORDER BY name")]
    stop = "stop" if args.bootstrap == 0 else f"stop, bootstrap {args.bootstrap}"
    print(f"sweep      trials  epochs  random best | {stop}: epochs ratio best | "
          "pause: epochs ratio best")
    for name in names:
        trials = curves(db, name)
        last = min(max(c) for c in trials)
        rungs = []
        r = args.min_resource
        while r < last:
            rungs.append(r)
            r *= args.eta
        full = len(trials) * last
        best = max(c[last] for c in trials)
        row = f"{name:<10} {len(trials):6d} {full:7d} {best:12.4f} |"
        for rule in ("stop", "pause"):
            epochs, found = replay(trials, rule, rungs, last, args.eta, args.slots,
                                   args.bootstrap)
            row += f" {epochs:11d} {epochs / full:5.3f} {found:.4f} |"
        print(row.rstrip(" |"))


if __name__ == "__main__":
    main()
