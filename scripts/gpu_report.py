#!/usr/bin/env python3
"""Report of scripts/gpu-validate.sh: report.md (ready to paste into docs/gpu-validation.md) and
report.json from the phase table, the probe, the CTest JUnit file of the gpu tests and the
benchmark logs that gpu-validate.sh left in --logs."""
import argparse
import json
import os
import re
import xml.etree.ElementTree as ET

BENCH_PHASES = ("bench-allocator", "bench-allreduce", "bench-ops", "main-job", "devices")


def read(path, limit=1 << 20):
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode("utf-8", "replace")
    except OSError:
        return ""


def phases(logs):
    rows = []
    for line in read(os.path.join(logs, "phases.tsv")).splitlines():
        parts = line.split("\t")
        if len(parts) >= 4:
            rows.append({"phase": parts[0], "status": parts[1], "exit": parts[2],
                         "seconds": float(parts[3]) if parts[3] not in ("", "-") else 0.0,
                         "note": parts[4] if len(parts) > 4 else ""})
    return rows


def skip_reason(output):
    # GoogleTest prints "<file>:<line>: Skipped" and the message on the next lines.
    m = re.search(r": Skipped\n(.*?)\n", output)
    return m.group(1).strip() if m else ""


def first_failure(output):
    m = re.search(r"^(.*(?:Failure|error:|what\(\)).*)$", output, re.M)
    lines = output[m.start():].splitlines()[:6] if m else output.strip().splitlines()[-6:]
    return " / ".join(l.strip() for l in lines if l.strip())[:600]


def tests(logs, name="gpu-tests.xml"):
    path = os.path.join(logs, name)
    result = {"passed": [], "failed": [], "skipped": []}
    if not os.path.exists(path):
        return result
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as e:
        result["failed"].append({"name": "(gpu-tests.xml unreadable)", "detail": str(e)})
        return result
    for case in root.iter("testcase"):
        name = case.get("name", "?")
        out = "".join(e.text or "" for e in case.iter("system-out"))
        t = float(case.get("time", "0") or 0)
        if case.find("failure") is not None or case.find("error") is not None or case.get("status") == "fail":
            result["failed"].append({"name": name, "seconds": t, "detail": first_failure(out)})
        elif case.find("skipped") is not None or case.get("status") in ("notrun", "disabled"):
            result["skipped"].append({"name": name, "reason": skip_reason(out) or case.get("status", "")})
        else:
            result["passed"].append({"name": name, "seconds": t})
    return result


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--logs", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--gpu-present", default="0")
    ap.add_argument("--commit", default="unknown")
    a = ap.parse_args()
    gpu = a.gpu_present == "1"
    ph = phases(a.logs)
    te = tests(a.logs)
    suite = tests(a.logs, "suite.xml")
    probe = read(os.path.join(a.logs, "probe.log")).strip()
    outputs = {p: read(os.path.join(a.logs, p + ".log"))[-6000:] for p in BENCH_PHASES}
    report = {"commit": a.commit, "gpu_present": gpu, "probe": probe, "phases": ph,
              "gpu_tests": {k: len(v) for k, v in te.items()}, "tests": te,
              "suite": {k: len(v) for k, v in suite.items()}, "suite_failed": suite["failed"], "outputs": outputs}
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "report.json"), "w") as f:
        json.dump(report, f, indent=1)

    md = [f"Commit {a.commit}. " + ("A GPU was present." if gpu else
          "**No GPU on this machine: nothing ran on a GPU** (configure and build only).")]
    md += ["", "```", probe, "```", "", "| phase | status | seconds | note |", "|---|---|---|---|"]
    md += [f"| {r['phase']} | {r['status']} | {r['seconds']:.1f} | {r['note']} |" for r in ph]
    if any(te.values()):
        md += ["", f"gpu tests: {len(te['passed'])} passed, {len(te['failed'])} failed, "
               f"{len(te['skipped'])} skipped."]
        for f_ in te["failed"]:
            md.append(f"- FAILED `{f_['name']}`: {f_['detail']}")
        for s in te["skipped"]:
            md.append(f"- skipped `{s['name']}`: {s['reason']}")
    if any(suite.values()):
        md += ["", f"rest of the suite (ctest -LE gpu) on this machine: {len(suite['passed'])} passed, "
               f"{len(suite['failed'])} failed, {len(suite['skipped'])} skipped."]
        md += [f"- FAILED `{f_['name']}`: {f_['detail']}" for f_ in suite["failed"]]
    for p in BENCH_PHASES:
        if outputs[p].strip():
            md += ["", f"{p}:", "```", outputs[p].strip()[-3000:], "```"]
    with open(os.path.join(a.out, "report.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md[:len(ph) + 8]))


if __name__ == "__main__":
    main()
