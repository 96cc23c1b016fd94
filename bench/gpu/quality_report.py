#!/usr/bin/env python3
"""The quality check of bench/gpu/run_on_gpu.sh: does the sweep's best trial reach a test
accuracy of TARGET within MINUTES of sweep wall time?

"Best" is what `sweep best` picks: the completed trial with the highest val_acc (the sweep's
metric). Its test_acc is measured once, after its last epoch. The sweep's clock starts at
--start (seconds since the epoch, taken just before `sweep run`), so loading the data and
starting the first trial count. The best trial changes as trials end; the check holds at
MINUTES when the best trial ended by then has test_acc >= TARGET.

Usage: quality_report.py TRIALS.json --start T0 [--target 0.95] [--minutes 15]
                         [--ran-minutes M] [--metric val_acc]
--ran-minutes: the wall time the sweep was given, when less than MINUTES (a short run on a
machine lent for less): a target not reached by then is reported as not yet shown rather
than missed. Exit status 0 when the target was reached within MINUTES, 1 otherwise.
"""
import argparse
import json
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trials")
    ap.add_argument("--start", type=float, required=True)
    ap.add_argument("--target", type=float, default=0.95)
    ap.add_argument("--minutes", type=float, default=15)
    ap.add_argument("--ran-minutes", type=float)
    ap.add_argument("--metric", default="val_acc")
    args = ap.parse_args()
    with open(args.trials) as f:
        trials = json.load(f)

    counts = {}
    for t in trials:
        counts[t["status"]] = counts.get(t["status"], 0) + 1
    print("trials: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))

    done = [t for t in trials
            if t["status"] == "completed" and args.metric in t.get("metrics", {})
            and t.get("ended") is not None]
    done.sort(key=lambda t: t["ended"])
    print(f"{'trial':>5} {'ended (min)':>11} {'epochs':>6} {args.metric:>8} {'test_acc':>8}  best so far")
    best = final = None  # the best trial by the metric so far; the same, within the limit
    reached = None  # minutes since which the best trial has had test_acc >= target
    for t in done:
        minute = (t["ended"] - args.start) / 60
        value = t["metrics"][args.metric]
        test = t["metrics"].get("test_acc")
        if best is None or value > best["metrics"][args.metric]:
            best = t
        if minute <= args.minutes:
            final = best
            # A better trial by the metric that tests lower takes the place of one that passed.
            if (best["metrics"].get("test_acc") or 0) >= args.target:
                reached = minute if reached is None else reached
            else:
                reached = None
        print(f"{t['trial']:>5} {minute:>11.2f} {t.get('epochs', 0):>6g} {value:>8.4f} "
              f"{test if test is not None else float('nan'):>8.4f}  trial {best['trial']}")

    if final is None:
        print(f"no trial completed within {args.minutes:g} minutes")
    else:
        test = final["metrics"].get("test_acc")
        print(f"best trial at {args.minutes:g} minutes: trial {final['trial']}, "
              f"{args.metric} {final['metrics'][args.metric]:.4f}, test_acc "
              f"{'none' if test is None else '%.4f' % test}, params {json.dumps(final['params'])}")
    ok = final is not None and (final["metrics"].get("test_acc") or 0) >= args.target
    if ok:
        print(f"test_acc >= {args.target:g} within {args.minutes:g} minutes: met (from minute "
              f"{reached:.2f})")
        return 0
    short = args.ran_minutes is not None and args.ran_minutes < args.minutes
    print(f"test_acc >= {args.target:g} within {args.minutes:g} minutes: "
          + (f"not shown (the sweep ran {args.ran_minutes:g} of the {args.minutes:g} minutes)"
             if short else "NOT met"))
    return 1


if __name__ == "__main__":
    sys.exit(main())
