#!/usr/bin/python3
"""Copies the dashboards (grafana/*.json) into charts/dralens/files/dashboards/, because Helm
reads nothing outside the chart. Copies that no longer have a source are removed. (The chart's
rule file, files/alerts/, is written by alerts/generate.py from alerts/config.yaml.)

  chart_files.py            copy (what `make chart-files` runs)
  chart_files.py --check    change nothing; exit 1 naming every copy that is missing, differs
                           byte for byte from its source, or has no source
"""
import argparse
import pathlib
import shutil
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
CHART_FILES = ROOT / "charts" / "dralens" / "files"


def pairs(root=ROOT, chart_files=CHART_FILES):
    """(source dir, copy dir, the sources that belong in the copy dir)."""
    grafana = root / "grafana"
    dashboards = sorted(grafana.glob("*.json")) if grafana.is_dir() else []
    return [(grafana, chart_files / "dashboards", dashboards, "*.json")]


def check(root=ROOT, chart_files=CHART_FILES):
    """Returns a list of problems, empty when every copy equals its source."""
    problems = []
    for _, dest, sources, pattern in pairs(root, chart_files):
        names = {p.name for p in sources}
        for src in sources:
            copy = dest / src.name
            if not copy.is_file():
                problems.append(f"{copy.relative_to(root)}: missing copy of {src.relative_to(root)}")
            elif copy.read_bytes() != src.read_bytes():
                problems.append(f"{copy.relative_to(root)}: differs from {src.relative_to(root)}")
        if dest.is_dir():
            for copy in sorted(dest.glob(pattern)):
                if copy.name not in names:
                    problems.append(f"{copy.relative_to(root)}: no source (stale copy)")
    return problems


def copy(root=ROOT, chart_files=CHART_FILES):
    for _, dest, sources, pattern in pairs(root, chart_files):
        dest.mkdir(parents=True, exist_ok=True)
        names = {p.name for p in sources}
        for src in sources:
            shutil.copyfile(src, dest / src.name)
        for stale in dest.glob(pattern):
            if stale.name not in names:
                stale.unlink()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of copying")
    args = parser.parse_args()
    if args.check:
        problems = check()
        for p in problems:
            print(p, file=sys.stderr)
        if problems:
            print("run `make chart-files` to refresh the chart's copies", file=sys.stderr)
            return 1
        return 0
    copy()
    return 0


if __name__ == "__main__":
    sys.exit(main())
