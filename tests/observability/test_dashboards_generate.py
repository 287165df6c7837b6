#!/usr/bin/python3
"""grafana/generate.py: queries always carry the dashboard selector, panels flow into rows as
Grafana places them, a bad definition is refused with a message, and --check finds a dashboard
that differs from its definition, has none, or is missing."""

import contextlib
import io
import json
import os
import shutil
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "grafana"))
import generate  # noqa: E402


def run(*argv):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = generate.main(list(argv))
    return rc, err.getvalue()


class QueryTest(unittest.TestCase):
    def test_the_selector_is_expanded(self):
        self.assertEqual(generate.q("up{S}"), "up{" + generate.SELECTOR + "}")
        self.assertEqual(generate.q('x{S, a="b"}'), "x{" + generate.SELECTOR + ', a="b"}')

    def test_a_query_without_the_selector_is_refused(self):
        with self.assertRaisesRegex(ValueError, "without the {S} selector"):
            generate.q("sum(dralens_node_in_flight)")
        with self.assertRaises(ValueError):
            generate.q("x{Sx}")


class LayoutTest(unittest.TestCase):
    def test_panels_flow_left_to_right_below_the_tallest(self):
        d = generate.dashboard("u", "t", "d", [], "m", [generate.row("R", [
            generate.timeseries("a", "a", [("x{S}", "")], h=8),
            generate.table("b", "b", "x{S}", "V", h=9),
            generate.stat("c", "c", "x{S}"),
        ]), generate.row("R2", [generate.stat("d", "d", "x{S}")])])
        pos = {p["title"]: (p["id"], p["gridPos"]) for p in d["panels"]}
        self.assertEqual(pos["R"], (1, {"h": 1, "w": 24, "x": 0, "y": 0}))
        self.assertEqual(pos["a"], (2, {"h": 8, "w": 12, "x": 0, "y": 1}))
        self.assertEqual(pos["b"], (3, {"h": 9, "w": 12, "x": 12, "y": 1}))
        self.assertEqual(pos["c"], (4, {"h": 4, "w": 4, "x": 0, "y": 10}))
        self.assertEqual(pos["R2"], (5, {"h": 1, "w": 24, "x": 0, "y": 14}))
        self.assertEqual(pos["d"], (6, {"h": 4, "w": 4, "x": 0, "y": 15}))
        self.assertEqual([v["name"] for v in d["templating"]["list"]],
                         ["datasource", "cluster", "job", "instance"])

    def test_a_panel_wider_than_the_dashboard_is_refused(self):
        with self.assertRaisesRegex(ValueError, "width 25"):
            generate.dashboard("u", "t", "d", [], "m",
                               [generate.row("R", [generate.stat("a", "a", "x{S}", w=25)])])

    def test_every_dashboard_ends_with_the_self_monitoring_row(self):
        for path, text in generate.outputs().items():
            if not path.endswith(".json"):
                continue
            d = json.loads(text)
            rows = [p["title"] for p in d["panels"] if p["type"] == "row"]
            self.assertEqual(rows[-1], "Self-monitoring", path)


class CheckTest(unittest.TestCase):
    def test_check_finds_drift_strays_and_missing_dashboards(self):
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "src")
            shutil.copytree(generate.SRC, src)
            self.assertEqual(run("--src", src, "--out", tmp, "--check")[0], 1, "nothing written yet")
            self.assertEqual(run("--src", src, "--out", tmp)[0], 0)
            self.assertEqual(run("--src", src, "--out", tmp, "--check"), (0, ""))
            node = os.path.join(tmp, "node.json")
            with open(node, "a") as f:
                f.write(" ")
            rc, err = run("--src", src, "--out", tmp, "--check")
            self.assertEqual(rc, 1)
            self.assertIn("node.json: differs from its definition", err)
            run("--src", src, "--out", tmp)
            with open(os.path.join(tmp, "stray.json"), "w") as f:
                f.write("{}\n")
            rc, err = run("--src", src, "--out", tmp, "--check")
            self.assertIn("stray.json: no definition", err)
            run("--src", src, "--out", tmp)
            self.assertFalse(os.path.exists(os.path.join(tmp, "stray.json")))
            with open(os.path.join(src, "broken.py"), "w") as f:
                f.write("from generate import stat\nX = 1\n")
            rc, err = run("--src", src, "--out", tmp, "--check")
            self.assertEqual(rc, 2)
            self.assertIn("defines no DASHBOARD", err)

    def test_the_committed_dashboards_are_generated(self):
        self.assertEqual(run("--check"), (0, ""), "run make generate")


if __name__ == "__main__":
    unittest.main()
