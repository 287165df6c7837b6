#!/usr/bin/python3
"""Renders charts/dralens with Helm's own template engines (tests/chart/render, Go text/template
plus sprig) for the default values and every variant in tests/chart/values/, and checks what
comes out: well-formed objects, least-privilege RBAC, node flags and mounts against the CLI
contract in the README, monitoring objects equal to the files they are built from, and that every
values.yaml key is documented, used by a template and validated by values.schema.json.
The checks are in objects_checks.py and values_checks.py, the helpers they share in
chart_lib.py.

Usage: chart_test.py [--build-dir DIR] [unittest args]
       chart_test.py --print-values-table | --write-values-table
The renderer is built into --build-dir (default: a temporary directory) with the Debian Go
packages in GOPATH mode; nothing is fetched.
"""
import argparse
import os
import re
import sys
import tempfile
import unittest

import yaml

import chart_lib
from chart_lib import CHART, values_table
from objects_checks import ObjectsChecks
from values_checks import ValuesChecks


class ChartTest(ObjectsChecks, ValuesChecks, unittest.TestCase):
    maxDiff = None

    def write(self, values):
        f = tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False)
        yaml.safe_dump(values, f)
        f.close()
        self.addCleanup(os.unlink, f.name)
        return f.name


def main():
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--build-dir")
    parser.add_argument("--print-values-table", action="store_true")
    parser.add_argument("--write-values-table", action="store_true",
                        help="refresh the table in charts/dralens/README.md (make generate)")
    args, rest = parser.parse_known_args()
    if args.print_values_table:
        sys.stdout.write(values_table((CHART / "values.yaml").read_text()))
        return 0
    if args.write_values_table:
        readme = CHART / "README.md"
        text = readme.read_text()
        table = values_table((CHART / "values.yaml").read_text())
        new, n = re.subn(r"(<!-- values:begin -->\n).*?(<!-- values:end -->)",
                         lambda m: m.group(1) + table + m.group(2), text, flags=re.S)
        if n != 1:
            print(f"{readme}: no values:begin/values:end markers", file=sys.stderr)
            return 1
        readme.write_text(new)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        chart_lib.RENDER = chart_lib.build_renderer(args.build_dir or tmp)
        prog = unittest.main(argv=[sys.argv[0]] + rest, exit=False)
        return 0 if prog.result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
