#!/usr/bin/env python3
"""Sort fuzz_engine_plan's findings by what the plan changed and how it failed.

    scripts/classify-plan-findings.py FUZZ_BINARY SEED_PLAN ARTIFACT_DIR

FUZZ_BINARY is a build of cpp/fuzz/fuzz_engine_plan (for another commit too: how issue 30 showed
that the fuzzer finds the old loader's holes), SEED_PLAN the plan.json it writes with
TENSORACLE_FUZZ_WRITE_SEEDS, ARTIFACT_DIR where libFuzzer left crash-* files. Each artifact is
rerun to read how it fails (the sanitizer's report, the oracle's message, its first frame in
cpp/src) and compared with the seed to read what changed. A change the mutator makes to linked
fields at once counts as one change: a node writing another value (its readers, producers and
outputs following) and one I/O entry taking another's value (its shape, the outputs list and the
dropped layer following). What changed is then named by the class of hole it belongs to:

  size    a memory size, or a value's arena offset or size        (issue 30, hole 2)
  weight  a node writes a constant or a graph input               (hole 3)
  arity   a node's inputs or an epilogue operand                  (hole 4)
  input   a graph input id                                        (hole 5)
  depth   JSON nested past any sane depth                         (hole 6)
  alias   two I/O entries name one value                          (hole 12)
  other   anything else (a type, a layer name, a parameter)

Prints one line per artifact, then the count per failure, then per class the artifacts whose
changes all fall in that one class, with the smallest such change as the example. Standard
library only.
"""
import collections
import json
import os
import re
import subprocess
import sys


def diff(a, b, path, out):
    if type(a) is not type(b):
        out.append((path, a, b))
    elif isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                out.append((f"{path}/{k}", a.get(k, "<absent>"), b.get(k, "<absent>")))
            else:
                diff(a[k], b[k], f"{path}/{k}", out)
    elif isinstance(a, list):
        if len(a) != len(b):
            out.append((path, f"len {len(a)}", f"len {len(b)}"))
        for i, (x, y) in enumerate(zip(a, b)):
            diff(x, y, f"{path}/{i}", out)
    elif a != b:
        out.append((path, a, b))


def max_depth(text):
    depth = deepest = 0
    for c in text:
        if c in b"[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in b"]}":
            depth -= 1
    return deepest


REFERENCE = re.compile(r"^/(nodes/\d+/inputs/\d+|nodes/\d+/epilogue/\d+/operand|outputs/\d+|inputs/\d+|io/\d+/value)$")


def classify_changes(seed, changes):
    """The classes of hole the changes belong to, linked changes counted once."""
    values = seed["values"]
    classes = set()
    consumed = set()
    for k, a, b in changes:  # a node writes a constant or an input; what follows it
        if re.fullmatch(r"/nodes/\d+/output", k) and isinstance(b, int) and isinstance(a, int) \
                and 0 <= b < len(values) and values[b]["role"] in ("constant", "input"):
            classes.add("weight")
            consumed.add(k)
            for k2, a2, b2 in changes:
                if REFERENCE.match(k2) and a2 == a and b2 == b:
                    consumed.add(k2)
                if re.fullmatch(rf"/values/({a}|{b})/(producer|is_output|arena_offset)", k2):
                    consumed.add(k2)
    io = seed.get("io", [])
    for k, a, b in changes:  # one I/O entry takes another's value; what follows it
        m = re.fullmatch(r"/io/(\d+)/value", k)
        if m and k not in consumed and any(t.get("value") == b for t in io):
            classes.add("alias")
            consumed.add(k)
            i = m.group(1)
            for k2, a2, b2 in changes:
                if re.match(rf"^/io/{i}/(dims|min|opt|max|type)(/|$)", k2) or (re.fullmatch(r"/outputs/\d+", k2) and a2 == a):
                    consumed.add(k2)
            if any(k2 == "/nodes" for k2, _, _ in changes):  # the layer left without a reader went
                consumed.update(k2 for k2, _, _ in changes if k2.startswith("/nodes") or k2.endswith("/producer"))
    for k, a, b in changes:
        if k in consumed:
            continue
        if k.startswith("/memory/") or re.fullmatch(r"/values/\d+/(max_bytes|arena_offset)", k):
            classes.add("size")
        elif re.match(r"^/nodes/\d+/inputs(/|$)", k) or re.search(r"/epilogue/\d+/operand$", k):
            classes.add("arity")
        elif re.match(r"^/inputs(/|$)", k):
            classes.add("input")
        else:
            classes.add("other")
    return classes


def failure(binary, path):
    r = subprocess.run([binary, path], capture_output=True, text=True, errors="replace", timeout=300)
    err = r.stderr
    m = (re.search(r"ERROR: AddressSanitizer: ([\w-]+)", err) or re.search(r"runtime error: ([^\n]{0,70})", err)
         or re.search(r"fuzz_engine_plan: (output \S+ [^\n(]{0,60})", err) or re.search(r"ERROR: libFuzzer: ([\w-]+)", err))
    kind = m.group(1).strip() if m else f"exit {r.returncode}"
    kind = re.sub(r"0x[0-9a-f]+", "0x…", kind)
    frame = next((fm.group(1) for line in err.splitlines() if re.match(r"\s+#\d+", line)
                  for fm in [re.search(r"cpp/(src/[\w/.]+:\d+)", line)] if fm), "")
    return kind, frame


def short(v):
    s = v if isinstance(v, str) else json.dumps(v)
    return s if len(s) < 40 else s[:37] + "..."


def main():
    binary, seed_path, art_dir = sys.argv[1:4]
    seed = json.load(open(seed_path))
    rows = []
    for name in sorted(os.listdir(art_dir)):
        path = os.path.join(art_dir, name)
        text = open(path, "rb").read()
        changes = []
        try:
            if max_depth(text) > 1000:
                raise RecursionError
            diff(seed, json.loads(text), "", changes)
            classes = classify_changes(seed, changes)
            what = "; ".join(f"{k}: {short(a)} -> {short(b)}" for k, a, b in changes[:4])
            what += f" (+{len(changes) - 4})" if len(changes) > 4 else ""
        except (RecursionError, ValueError):
            classes = {"depth"} if max_depth(text) > 1000 else {"other"}
            what = f"not parsed (nesting depth {max_depth(text)})"
        kind, frame = failure(binary, path)
        rows.append((name[:14], kind, frame, sorted(classes), len(changes), what))
        print(f"{name[:14]} | {kind} | {frame} | {','.join(sorted(classes))} | {what}", flush=True)
    print("\nby failure:")
    for (kind, frame), n in collections.Counter((r[1], r[2]) for r in rows).most_common():
        print(f"{n:5d}  {kind}  {frame}")
    print("\nartifacts whose changes all belong to one class:")
    single = collections.defaultdict(list)
    for r in rows:
        if len(r[3]) == 1:
            single[r[3][0]].append(r)
    for c in ("size", "weight", "arity", "input", "depth", "alias", "other"):
        if c in single:
            best = min(single[c], key=lambda r: r[4] or 99)
            print(f"{c:7s} {len(single[c]):5d}; e.g. {best[0]}: {best[1]} {best[2]} after {best[5]}")


if __name__ == "__main__":
    main()
