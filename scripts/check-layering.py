#!/usr/bin/env python3
"""Fails on an include that reaches upward against the layers of the house (DESIGN.md, "Layers of
the house"; docs/architecture.md): a module may include only itself and the modules above it in

    core, ops, data, collective, distribute, summary, checkpoint, optimizer, model, launch

Scans every .h/.cc/.cu of those folders (under chorus/) for `#include <chorus/<module>/...>` (and the old quoted
`#include "<module>/..."`, which the build no longer resolves) and prints file:line: what
for each violation; exit 1 if any, 0 otherwise. `--self-test` checks the checker on snippets.
Issue 19, item 3 ("a check in the test suite fails on an upward include against DESIGN's order")."""
import argparse
import os
import re
import sys

ORDER = ["core", "ops", "data", "collective", "distribute", "summary", "checkpoint", "optimizer", "model", "launch"]
RANK = {m: i for i, m in enumerate(ORDER)}
INCLUDE = re.compile(r'^\s*#\s*include\s*(?:<chorus/|")([a-z_]+)/')


def violations(module, text, path):
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        m = INCLUDE.match(line)
        if m and m.group(1) in RANK and RANK[m.group(1)] > RANK[module]:
            found.append(f"{path}:{n}: {module}/ includes {m.group(1)}/ ({line.strip()}), "
                         f"which comes after it in the layers ({' < '.join(ORDER)})")
    return found


def self_test():
    ok = not violations("ops", '#include <chorus/core/tensor.h>\n#include <chorus/ops/x.h>\n', "a")
    ok &= len(violations("core", '#include <chorus/ops/ops.h>\n', "g")) == 1
    ok &= len(violations("data", '#include <chorus/collective/x.h>\n#include <chorus/model/m.h>\n', "h")) == 2
    ok &= not violations("core", '#include <vector>\n#include <oneapi/dnnl/dnnl.hpp>\n', "i")
    ok &= not violations("ops", '#include "core/tensor.h"\n#include "ops/x.h"\n', "a")
    ok &= len(violations("core", '#include "ops/ops.h"\n', "b")) == 1
    ok &= len(violations("checkpoint", '  #  include "distribute/mirrored_variable.h"\n', "c")) == 0
    ok &= len(violations("optimizer", '#include "model/model.h"\n', "d")) == 1
    ok &= not violations("launch", '#include "model/model.h"\n#include <vector>\n', "e")
    ok &= not violations("core", '// #include "ops/ops.h" is mentioned in a comment\n', "f")
    print("check-layering self-test:", "ok" if ok else "FAILED")
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    found, files = [], 0
    for module in ORDER:
        base = os.path.join(a.root, "chorus", module)
        for dirpath, _, names in os.walk(base):
            for name in sorted(names):
                if name.endswith((".h", ".cc", ".cu")):
                    path = os.path.join(dirpath, name)
                    with open(path, encoding="utf-8", errors="replace") as f:
                        found += violations(module, f.read(), os.path.relpath(path, a.root))
                    files += 1
    for v in found:
        print(v)
    print(f"check-layering: {len(found)} upward include(s) in {files} file(s) of {len(ORDER)} modules")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
