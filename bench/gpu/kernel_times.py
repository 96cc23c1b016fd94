#!/usr/bin/env python3
"""Sums the kernel times of an `ncu --csv --metrics gpu__time_duration.sum` run by kernel name.

Usage: kernel_times.py NCU_OUTPUT. Lines that are not CSV rows (the program's own output, ncu's
==PROF== notes) are skipped. Prints the total, then each name's time, share and launch count.
"""
import collections
import csv
import sys


def main():
    text = open(sys.argv[1], errors="replace").read()
    rows = list(csv.reader(l for l in text.splitlines() if l.startswith('"')))
    if not rows:
        print(text[-3000:])
        sys.exit("kernel_times.py: no kernel rows in ncu's output")
    head = rows[0]
    name = head.index("Kernel Name")
    metric, unit, value = (head.index(k) for k in ("Metric Name", "Metric Unit", "Metric Value"))
    scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}
    total = collections.defaultdict(float)
    count = collections.Counter()
    for r in rows[1:]:
        if r[metric] != "gpu__time_duration.sum":
            continue
        us = float(r[value].replace(",", "")) * scale.get(r[unit], 1.0)
        total[r[name][:120]] += us
        count[r[name][:120]] += 1
    all_us = sum(total.values())
    print(f"{sum(count.values())} kernels, {all_us:.1f} us in all")
    for k, us in sorted(total.items(), key=lambda kv: -kv[1]):
        print(f"{us:10.1f} us {100 * us / all_us:5.1f}% {count[k]:5d}x  {k}")


if __name__ == "__main__":
    main()
