#!/usr/bin/python3
"""Where the analyzer's apply goes, by event kind, at two fleet sizes.

Reads, for each size, the output of `replay_bench` and the `perf script -F ip,sym --no-inline`
text of a `perf record --call-graph dwarf` taken of that run, and prints for each event kind a
call tree under the apply with inclusive microseconds per event at both sizes and the growth.

A sample belongs to the kind of the `ApplyKind<N>` frame on its stack (replay_bench applies
each event under one). A node's microseconds are its share of the kind's samples times the
kind's apply per event that replay_bench printed (the mean of its rounds after the first), so
the figures add up to the apply the bench measured, not to the sampling rate.

  apply_profile.py SMALL.log SMALL.script LARGE.log LARGE.script [--kinds=release,taint]
                   [--depth=4] [--min-us=0.15]

tests/bench/scale/README.md shows how to take the two profiles.
"""

import argparse
import collections
import re
import sys

import compare_replay  # its parser of replay_bench's round lines

KINDS = ["allocate", "pod_start", "pod_stop", "release", "pod_delete", "pod_add", "taint"]
WRAPPER = re.compile(r"(Role::|std::_Function_handler<>|std::function<>|anon::Apply<>)")
KIND_FRAME = re.compile(r"ApplyKind<\(dralens::bench::scale::EventKind\)(\d+)>")


def kind_us(log_path):
    """Mean apply per event by kind over the rounds after the first, from replay_bench's log."""
    sums, counts = collections.Counter(), collections.Counter()
    with open(log_path, encoding="utf-8") as log:
        for _, round_number, _, kinds in compare_replay.parse(log.read()):
            if round_number == 1:
                continue
            for kind, us in kinds.items():
                sums[kind] += us
                counts[kind] += 1
    return {k: sums[k] / counts[k] for k in counts}


def short(symbol):
    """A frame's name without arguments or template arguments, its last two scopes."""
    s = symbol.replace("(anonymous namespace)", "anon")
    s = re.sub(r"\(.*", "", s)
    s = re.sub(r"<.*", "<>", s)
    parts = [p for p in s.split("::") if p]
    return "::".join(parts[-2:])[:70] or "?"


def samples(script_path):
    """Yields each sample's frames, leaf first."""
    frames = []
    for line in open(script_path, encoding="utf-8", errors="replace"):
        if not line.strip():
            if frames:
                yield frames
            frames = []
            continue
        parts = line.strip().split(None, 1)
        frames.append(parts[1] if len(parts) > 1 else "?")
    if frames:
        yield frames


def trees(script_path, depth):
    """Per kind index: sample count, and inclusive counts per call path below ApplyKind."""
    totals = collections.Counter()
    paths = collections.defaultdict(collections.Counter)
    for frames in samples(script_path):
        at = next((i for i, f in enumerate(frames) if KIND_FRAME.search(f)), None)
        if at is None:
            continue
        kind = int(KIND_FRAME.search(frames[at]).group(1))
        totals[kind] += 1
        below = [short(f) for f in reversed(frames[:at])]  # root first
        # Start under the apply: the bench's frames and the handlers' wrappers say nothing.
        start = next((i for i, f in enumerate(below) if not WRAPPER.match(f)), len(below))
        path = tuple(below[start:start + depth])
        seen = set()
        for j in range(1, len(path) + 1):
            if path[:j] not in seen:
                seen.add(path[:j])
                paths[kind][path[:j]] += 1
    return totals, paths


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("small_log")
    ap.add_argument("small_script")
    ap.add_argument("large_log")
    ap.add_argument("large_script")
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--min-us", type=float, default=0.15)
    args = ap.parse_args()

    us = [kind_us(args.small_log), kind_us(args.large_log)]
    profiles = [trees(args.small_script, args.depth), trees(args.large_script, args.depth)]
    printed = 0
    for name in args.kinds.split(","):
        if name not in KINDS:
            sys.exit("unknown kind %r (kinds: %s)" % (name, ", ".join(KINDS)))
        k = KINDS.index(name)
        if any(name not in u or p[0][k] == 0 for u, p in zip(us, profiles)):
            print("== %s: no samples or no figure at one of the sizes" % name)
            continue
        print("== %s: %.2f us per event small, %.2f large (%d and %d samples)" %
              (name, us[0][name], us[1][name], profiles[0][0][k], profiles[1][0][k]))
        print("   small   large  growth")

        def value(side, path):
            totals, paths = profiles[side]
            return paths[k][path] / totals[k] * us[side][name]

        def show(prefix):
            nonlocal printed
            kids = {p for side in (0, 1) for p in profiles[side][1][k]
                    if len(p) == len(prefix) + 1 and p[:len(prefix)] == prefix}
            rows = [(value(0, p), value(1, p), p) for p in kids]
            for small, large, p in sorted(rows, key=lambda r: -r[1]):
                if max(small, large) < args.min_us:
                    continue
                print("  %6.2f  %6.2f  %+6.2f  %s%s" %
                      (small, large, large - small, "  " * len(prefix), p[-1]))
                printed += 1
                show(p)

        show(())
    return 0 if printed else 1


if __name__ == "__main__":
    sys.exit(main())
