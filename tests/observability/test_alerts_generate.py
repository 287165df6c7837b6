#!/usr/bin/python3
"""alerts/generate.py: a bad configuration is refused with a message that names the problem,
the generated files are found stale when they drift, and the writer reads back as written."""

import copy
import os
import shutil
import sys
import tempfile
import unittest

import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "alerts"))
import generate  # noqa: E402


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def base_config():
    return generate.load()


def first_alert(config, name=None):
    for a in generate.alerts(config):
        if name is None or a["alert"] == name:
            return a
    raise KeyError(name)


class ConfigCheckTest(unittest.TestCase):
    def refused(self, mutate, words):
        config = copy.deepcopy(base_config())
        mutate(config)
        with self.assertRaises(generate.ConfigError) as ctx:
            generate.check(config)
        self.assertIn(words, str(ctx.exception))

    def test_the_real_configuration_is_valid(self):
        generate.check(base_config())

    def test_bad_configurations_name_the_problem(self):
        slow = "DralensPrepareSlow"
        cases = [
            (lambda c: c.update(runbookBaseUrl="alerts/runbook.md"), "not an absolute http(s) URL"),
            (lambda c: c.update(runbookBaseUrl="https://x/runbook.md#a"), "without a fragment"),
            (lambda c: c.update(extra=1), "unknown top-level key(s): extra"),
            (lambda c: first_alert(c, slow).update(severity="page"), "severity 'page'"),
            (lambda c: first_alert(c, slow).update({"for": "soon"}), "for 'soon' is not a Prometheus duration"),
            (lambda c: first_alert(c, slow).update(threshold="ten"), "threshold 'ten' is not a number"),
            (lambda c: first_alert(c, slow).pop("thresholdDoc"), "threshold and thresholdDoc go together"),
            (lambda c: first_alert(c, slow).update(enabled="yes"), "enabled must be true or false"),
            (lambda c: first_alert(c, slow).update(expr="up > 1"), "must hold ${threshold} once"),
            (lambda c: first_alert(c, slow).update(expr="up > ${threshold} or up"),
             "${threshold} must end its line"),
            (lambda c: first_alert(c, "DralensNodeDown").update(expr="up > ${threshold}"),
             "${threshold} in the expression needs a threshold"),
            (lambda c: first_alert(c, "DralensNodeDown").update(expr="up{${nodes}} == 0"),
             "unknown placeholder ${nodes}"),
            (lambda c: first_alert(c, slow).update(labels={}), "unknown key(s) labels"),
            (lambda c: first_alert(c, slow).pop("summary"), "missing summary"),
            (lambda c: c["groups"][0]["alerts"].append(copy.deepcopy(first_alert(c, slow))),
             "DralensPrepareSlow is defined twice"),
            (lambda c: first_alert(c, slow).update(alert="dralens-slow"), "is not CamelCase"),
        ]
        for mutate, words in cases:
            with self.subTest(words=words):
                self.refused(mutate, words)

    def test_a_file_that_is_not_yaml_is_refused(self):
        with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
            f.write("groups: [\n")
            f.flush()
            with self.assertRaises(generate.ConfigError) as ctx:
                generate.load(f.name)
            self.assertIn("not YAML", str(ctx.exception))


class RenderTest(unittest.TestCase):
    def test_disabled_alerts_leave_the_rules_but_not_the_chart_copy(self):
        config = copy.deepcopy(base_config())
        first_alert(config, "DralensOtlpExportFailing")["enabled"] = False
        first_alert(config, "DralensClusterViewStale")["enabled"] = False
        names = [r.get("alert") for g in generate.rules(config)["groups"] for r in g["rules"]]
        self.assertNotIn("DralensOtlpExportFailing", names)
        self.assertNotIn("dralens.self", [g["name"] for g in generate.rules(config)["groups"]],
                         "a group left without rules is dropped")
        everything = generate.rules(config, include_disabled=True)
        self.assertIn("DralensOtlpExportFailing",
                      [r.get("alert") for g in everything["groups"] for r in g["rules"]])
        self.assertIn("(disabled)", generate.table(config))

    def test_thresholds_print_as_promql_and_helm_do(self):
        # What Go's %v prints for these float64 values (Helm's printf in the chart).
        for value, text in ((900, "900"), (0.5, "0.5"), (1e-06, "1e-06"), (2.0, "2"),
                            (1e6, "1e+06"), (123456789, "1.23456789e+08"), (100000, "100000"),
                            (0.05, "0.05"), (0.0001, "0.0001"), (0.00001234, "1.234e-05"),
                            (-2.5, "-2.5"), (1800, "1800"), (0, "0")):
            self.assertEqual(generate.format_number(value), text)

    def test_runbook_urls_are_absolute(self):
        for g in generate.rules(base_config())["groups"]:
            for r in g["rules"]:
                if "alert" in r:
                    self.assertRegex(r["annotations"]["runbook_url"], r"^https://[^#]+#dralens[a-z]+$")

    def test_written_rules_read_back_as_the_document(self):
        doc = generate.rules(base_config())
        self.assertEqual(yaml.safe_load(generate.rules_text(doc, "# h\n")), doc)


class DriftTest(unittest.TestCase):
    def test_check_finds_every_drifted_file(self):
        names = ("RULES", "CHART_RULES", "VALUES", "SCHEMA", "README")
        saved = {n: getattr(generate, n) for n in names}
        with tempfile.TemporaryDirectory() as tmp:
            try:
                for n in names:
                    dest = os.path.join(tmp, n.lower())
                    shutil.copyfile(saved[n], dest)
                    setattr(generate, n, dest)
                sys.argv = ["generate.py", "--check"]
                self.assertEqual(generate.main(), 0, "the committed files are stale: make generate")
                # A hand edit of a generated part of each file.
                edits = {"RULES": ("> 10  # threshold", "> 11  # threshold"),
                         "CHART_RULES": ("> 10  # threshold", "> 11  # threshold"),
                         "VALUES": ("    threshold: 10\n", "    threshold: 11\n"),
                         "SCHEMA": ('"runbookBaseUrl"', '"runbookBase"'),
                         "README": ("| critical | 10m |", "| critical | 11m |")}
                for n in names:
                    with self.subTest(file=n):
                        path = getattr(generate, n)
                        good = read(path)
                        old, new = edits[n]
                        self.assertIn(old, good)
                        with open(path, "w") as f:
                            f.write(good.replace(old, new, 1))
                        self.assertEqual(generate.main(), 1)
                        sys.argv = ["generate.py"]
                        self.assertEqual(generate.main(), 0)
                        self.assertEqual(read(path), good, "generate.py restores the file")
                        sys.argv = ["generate.py", "--check"]
            finally:
                for n, v in saved.items():
                    setattr(generate, n, v)


if __name__ == "__main__":
    unittest.main()
