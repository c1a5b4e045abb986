#!/usr/bin/env python3
"""Summarises an Nsight Compute CSV of kernel durations into GPU time per training step.

  python3 scripts/ncu_summary.py FILE.csv --steps P [--top 25] [--label NAME]
  python3 scripts/ncu_summary.py --self-test      (the parser on both of ncu's CSV layouts; ctest)

FILE.csv: `ncu --import X.ncu-rep --csv --page raw --metrics gpu__time_duration.sum` (or
`ncu --csv ...` output), one row per kernel launch that ncu recorded; scripts/gpu-profile.sh
records P training steps between cudaProfilerStart and cudaProfilerStop. Prints the total kernel
time per step, then the kernels by total time: launches per step, µs per step, share of the step.
Kernel durations are measured one kernel at a time (ncu serializes them), so the total is the
GPU's busy time per step, not the step's wall time. Names are shortened to 100 characters.
Rows that are not launches (ncu's units row, its ==PROF== lines) are skipped; a file with no
launch row is an error (exit 1).
"""
import argparse
import collections
import csv
import io
import sys


def unit_scale(unit):
    """Nanoseconds per `unit` as ncu names time units; ValueError for any other name."""
    scales = {"ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6, "s": 1e9,
              "second": 1e9}
    if unit.strip() not in scales:
        raise ValueError(f"unknown time unit {unit!r} in ncu's CSV")
    return scales[unit.strip()]


def launches(path):
    """(kernel name, duration in ns, grid size) for each launch row of the CSV."""
    with open(path, newline="", errors="replace") as f:
        text = f.read()
    # ncu may print its own lines (==PROF==, warnings) before the table: start at the header.
    start = text.find('"ID"')
    if start < 0:
        return []
    rows = list(csv.reader(io.StringIO(text[start:])))
    header = rows[0]
    try:
        name_col = header.index("Kernel Name")
    except ValueError:
        return []
    time_col = next((i for i, h in enumerate(header) if h.startswith("gpu__time_duration")), None)
    metric_col = header.index("Metric Name") if "Metric Name" in header else None
    value_col = header.index("Metric Value") if "Metric Value" in header else None
    unit_col = header.index("Metric Unit") if "Metric Unit" in header else None
    grid_col = header.index("Grid Size") if "Grid Size" in header else None
    # --page raw: the row after the header holds each metric's unit ("us", "nsecond", ...).
    raw_scale = 1.0
    if time_col is not None and len(rows) > 1 and not rows[1][0].strip().isdigit() and len(rows[1]) > time_col:
        raw_scale = unit_scale(rows[1][time_col])
    out = []
    for row in rows[1:]:
        if not row or not row[0].strip().isdigit():
            continue  # the units row of --page raw, blank lines
        if time_col is not None:  # --page raw: one column per metric
            raw = row[time_col]
            scale = raw_scale
        elif metric_col is not None and row[metric_col].startswith("gpu__time_duration"):  # --page details
            raw = row[value_col]
            scale = unit_scale(row[unit_col] if unit_col is not None else "nsecond")
        else:
            continue
        try:
            ns = float(raw.replace(",", "")) * scale
        except ValueError:
            continue
        out.append((row[name_col], ns, row[grid_col] if grid_col is not None else ""))
    return out


RAW_SAMPLE = """==PROF== Connected to process 7 (/usr/bin/python3)
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","gpu__time_duration.sum"
"","","","","","","","","","","","nsecond"
"0","7","python3","127.0.0.1","void reduce_block_kernel<float>(R, const T *)","1","7","(256, 1, 1)","(32, 1, 1)","0","9.0","1,200,000"
"1","7","python3","127.0.0.1","conv_kernel","1","7","(256, 1, 1)","(100, 1, 1)","0","9.0","300000"
"2","7","python3","127.0.0.1","void reduce_block_kernel<float>(R, const T *)","1","7","(256, 1, 1)","(64, 1, 1)","0","9.0","800000"
"""
DETAILS_SAMPLE = """"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","7","b","h","k1","1","7","(256, 1, 1)","(8, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","usecond","2.50"
"1","7","b","h","k2","1","7","(256, 1, 1)","(8, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","msecond","1.5"
"""


def self_test():
    import os
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        def write(name, text):
            path = os.path.join(d, name)
            with open(path, "w") as f:
                f.write(text)
            return path
        raw = launches(write("raw.csv", RAW_SAMPLE))
        assert [r[1] for r in raw] == [1.2e6, 3e5, 8e5], raw
        # ncu 2025's raw page writes "us" and values in microseconds (seen on an H200, 2026-11-29).
        micro = launches(write("raw_us.csv", RAW_SAMPLE.replace('"nsecond"', '"us"').replace('"300000"', '"221.952"')))
        assert micro[1][1] == 221952.0, micro
        assert raw[0][2] == "(32, 1, 1)", raw
        details = launches(write("details.csv", DETAILS_SAMPLE))
        assert [r[1] for r in details] == [2500.0, 1.5e6], details
        assert launches(write("empty.csv", "==PROF== no kernels were profiled\n")) == []
        assert launches(write("header_only.csv", '"ID","Kernel Name","gpu__time_duration.sum"\n')) == []
    print("ncu_summary self-test: passed")
    return 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("csv")
    p.add_argument("--steps", type=int, required=True, help="training steps the profiled range holds")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--label", default="")
    a = p.parse_args()
    if a.steps < 1:
        print("ncu_summary: --steps must be >= 1", file=sys.stderr)
        return 2
    rows = launches(a.csv)
    if not rows:
        print(f"ncu_summary: no kernel launches in {a.csv}", file=sys.stderr)
        return 1
    by_name = collections.defaultdict(lambda: [0, 0.0, set()])
    for name, ns, grid in rows:
        entry = by_name[name]
        entry[0] += 1
        entry[1] += ns
        entry[2].add(grid)
    total = sum(ns for _, ns, _ in rows)
    label = f"{a.label}: " if a.label else ""
    print(f"{label}{len(rows)} launches over {a.steps} steps: {len(rows) / a.steps:.1f} kernels and "
          f"{total / a.steps / 1e3:.1f} us of kernel time per step")
    print(f"{'us/step':>10} {'share':>6} {'calls/step':>10}  kernel (grids)")
    for name, (count, ns, grids) in sorted(by_name.items(), key=lambda kv: -kv[1][1])[: a.top]:
        short = name if len(name) <= 100 else name[:97] + "..."
        grid_text = ",".join(sorted(g for g in grids if g))[:40]
        print(f"{ns / a.steps / 1e3:10.1f} {100 * ns / total:5.1f}% {count / a.steps:10.1f}  {short} ({grid_text})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
