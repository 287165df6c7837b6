#!/usr/bin/python3
"""Compares builds of the analyzer with replay_bench, run after run in turn.

On a shared machine the same binary can run 60 % slower minutes apart, so one run of each
build says little. This runs every given replay_bench binary in turn, --runs times, and prints
per binary and fleet size the minimum, median and maximum of the analyzer's apply (µs per
event) over the rounds after the warm-up, and the median by event kind. A slow period shows up
as a high maximum for every binary that ran in it; the medians and minimums are what to compare.

  tests/bench/scale/compare_replay.py /tmp/replay_before ./build/tests/bench/scale/replay_bench \
      --runs=6 --sizes=1000,100000

Arguments after `--` go to every replay_bench run. Exits non-zero when a run fails (a scrape
that differs from the truth fails replay_bench) or prints no figures.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys

ROUND = re.compile(r"^\[(\d+)\] round (\d+): .*?\bapply ([0-9.]+),.*?apply by kind: (.*?) us;")
KIND = re.compile(r"([a-z_]+) ([0-9.]+)")


def parse(output):
    """Yields (size, round, apply, {kind: us}) for each round line of replay_bench's output."""
    for line in output.splitlines():
        m = ROUND.match(line)
        if m:
            kinds = {k: float(v) for k, v in KIND.findall(m.group(4))}
            yield int(m.group(1)), int(m.group(2)), float(m.group(3)), kinds


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("binaries", nargs="+", help="replay_bench binaries to compare")
    parser.add_argument("--runs", type=int, default=3, help="runs of each binary, in turn")
    parser.add_argument("--sizes", default="1000,100000")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup-rounds", type=int, default=1,
                        help="rounds of each run left out (the first touches cold state)")
    argv = sys.argv[1:]
    extra = []
    if "--" in argv:
        extra = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
    args = parser.parse_args(argv)
    if args.rounds <= args.warmup_rounds:
        parser.error("--rounds must be more than --warmup-rounds")

    # figures[binary][size] = list of (apply, kinds)
    # By position, so that a binary given twice (noise against itself) keeps two sets of figures.
    figures = [{} for _ in args.binaries]
    for run in range(args.runs):
        for i, binary in enumerate(args.binaries):
            cmd = [binary, f"--sizes={args.sizes}", f"--rounds={args.rounds}"] + extra
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode != 0:
                sys.stderr.write(done.stdout + done.stderr)
                sys.exit(f"{' '.join(cmd)} exited {done.returncode}")
            got = 0
            for size, rnd, apply, kinds in parse(done.stdout + done.stderr):
                if rnd > args.warmup_rounds:
                    figures[i].setdefault(size, []).append((apply, kinds))
                    got += 1
            if got == 0:
                sys.stderr.write(done.stdout + done.stderr)
                sys.exit(f"{' '.join(cmd)} printed no round figures")
            print(f"run {run + 1}/{args.runs}: {binary} done", file=sys.stderr, flush=True)

    # Binaries by file name, unless two share one: then by position and path.
    base = [os.path.basename(b) for b in args.binaries]
    names = [n if base.count(n) == 1 else f"{i + 1}: {b}"
             for i, (b, n) in enumerate(zip(args.binaries, base))]
    kinds = sorted({k for per_size in figures for rows in per_size.values()
                    for _, ks in rows for k in ks})
    print("| binary | claims | rounds | apply min | apply median | apply max | "
          + " | ".join(f"{k} median" for k in kinds) + " |")
    print("|---|---|---|---|---|---|" + "---|" * len(kinds))
    for size in sorted({s for per_size in figures for s in per_size}):
        for i, name in enumerate(names):
            rows = figures[i].get(size, [])
            if not rows:
                continue
            applies = [a for a, _ in rows]
            by_kind = []
            for k in kinds:
                values = [ks[k] for _, ks in rows if k in ks]
                by_kind.append(f"{statistics.median(values):.2f}" if values else "-")
            print(f"| {name} | {size} | {len(rows)} | {min(applies):.2f} | "
                  f"{statistics.median(applies):.2f} | {max(applies):.2f} | "
                  + " | ".join(by_kind) + " |")


if __name__ == "__main__":
    main()
