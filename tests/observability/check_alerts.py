#!/usr/bin/python3
"""Checks the conventions of alerts/ that promtool does not:

- every alert has a severity label (critical, warning or info) and summary, description and
  runbook_url annotations; runbook_url is absolute, <runbook base>#<alert name in lower case>
  (the base is alerts/config.yaml's runbookBaseUrl), and runbook.md has that section with
  Meaning, First checks and Fix;
- every alert has a `for:` and at most one threshold line (marked "# threshold");
- recording rules are named level:metric:operations;
- every metric an expression names is in the catalogue (the generated table of
  docs/metrics.md), a recording rule defined here, or `up`; label names and values are ones the
  catalogue names;
- the promtool tests (alerts/tests/*.yaml) have, for every alert, a case where it fires and a
  case where it does not.

Usage: check_alerts.py [--rules FILE] [--tests DIR] [--runbook FILE] [--runbook-base URL]
                       [--catalogue FILE] [--expect-violations CHECK,...]
With --expect-violations it succeeds only when exactly the named checks fail (for the broken
fixture that proves the checks can fail).
"""

import argparse
import glob
import os
import re
import sys

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import promql  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SEVERITIES = {"critical", "warning", "info"}
RECORD_NAME = re.compile(r"^[a-z][a-z0-9_]*:[a-z][a-z0-9_]*:[a-z0-9_]+$")
THRESHOLD_LINE = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?\s*#\s*threshold\s*$", re.M)
# Series Prometheus itself makes.
EXTERNAL = {"up"}


def github_anchor(heading):
    anchor = heading.strip().lower()
    anchor = re.sub(r"[^\w\- ]", "", anchor)
    return anchor.replace(" ", "-")


def runbook_sections(path):
    sections, current = {}, None
    for line in open(path, encoding="utf-8"):
        m = re.match(r"^#{2,3} (.+)$", line)
        if m:
            current = github_anchor(m.group(1))
            sections[current] = ""
        elif current:
            sections[current] += line
    return sections


def default_runbook_base():
    with open(os.path.join(ROOT, "alerts", "config.yaml"), encoding="utf-8") as f:
        return yaml.safe_load(f)["runbookBaseUrl"]


def check(rules_path, tests_dir, runbook_path, catalogue_path, runbook_base):
    problems = []  # (check, message)

    def fail(check_name, message):
        problems.append((check_name, message))

    catalogue = promql.load_catalogue(catalogue_path)
    doc = yaml.safe_load(open(rules_path, encoding="utf-8"))
    rules = [r for g in doc.get("groups", []) for r in g.get("rules", [])]
    records = {r["record"] for r in rules if "record" in r}
    alerts = [r for r in rules if "alert" in r]
    sections = runbook_sections(runbook_path)
    if not re.match(r"^https?://", runbook_base):
        fail("runbook", f"the runbook base {runbook_base!r} is not an absolute URL")

    for rule in rules:
        name = rule.get("alert") or rule.get("record")
        try:
            tree = promql.parse(rule["expr"])
        except promql.ParseError as e:
            fail("expr-parses", f"{name}: {e}")
            continue
        for sel in promql.selectors(tree):
            for p in promql.check_selector(catalogue, sel, records, EXTERNAL):
                fail("metric-in-catalogue", f"{name}: {p}")

    for name in sorted(records):
        if not RECORD_NAME.match(name):
            fail("record-name", f"recording rule {name} is not named level:metric:operations")

    seen = set()
    for rule in alerts:
        name = rule["alert"]
        if name in seen:
            fail("unique-alert", f"{name} is defined twice")
        seen.add(name)
        labels = rule.get("labels", {}) or {}
        annotations = rule.get("annotations", {}) or {}
        if labels.get("severity") not in SEVERITIES:
            fail("severity", f"{name}: severity {labels.get('severity')!r} is not one of "
                             f"{sorted(SEVERITIES)}")
        for key in ("summary", "description", "runbook_url"):
            if not str(annotations.get(key, "")).strip():
                fail("annotations", f"{name}: no {key} annotation")
        if "for" not in rule:
            fail("for", f"{name}: no for: duration")
        if len(THRESHOLD_LINE.findall(rule["expr"])) > 1:
            fail("threshold", f"{name}: more than one '# threshold' line")
        anchor = name.lower()
        expected_url = f"{runbook_base}#{anchor}"
        if annotations.get("runbook_url") != expected_url:
            fail("runbook", f"{name}: runbook_url is {annotations.get('runbook_url')!r}, "
                            f"expected {expected_url!r}")
        section = sections.get(anchor)
        if section is None:
            fail("runbook", f"{name}: {runbook_path} has no section '### {name}'")
        else:
            for part in ("**Meaning.**", "**First checks.**", "**Fix.**"):
                if part not in section:
                    fail("runbook", f"{name}: its runbook section has no {part}")

    alert_names = {r["alert"] for r in alerts}
    for anchor in sections:
        if anchor.startswith("dralens") and anchor not in {a.lower() for a in alert_names}:
            fail("runbook", f"runbook section #{anchor} belongs to no alert")

    fires, quiet = set(), set()
    test_files = sorted(glob.glob(os.path.join(tests_dir, "*.yaml")))
    if not test_files:
        fail("tests", f"no promtool tests in {tests_dir}")
    for path in test_files:
        tdoc = yaml.safe_load(open(path, encoding="utf-8"))
        for rf in tdoc.get("rule_files", []):
            if os.path.abspath(os.path.join(os.path.dirname(path), rf)) != os.path.abspath(
                    rules_path):
                fail("tests", f"{path}: tests rule file {rf}, not {rules_path}")
        for test in tdoc.get("tests", []):
            for case in test.get("alert_rule_test", []) or []:
                (fires if case.get("exp_alerts") else quiet).add(case["alertname"])
    for name in sorted(alert_names):
        if name not in fires:
            fail("tests", f"{name}: no promtool test case where it fires")
        if name not in quiet:
            fail("tests", f"{name}: no promtool test case where it does not fire")
    for name in sorted((fires | quiet) - alert_names):
        fail("tests", f"promtool tests name an unknown alert {name}")
    return problems, len(alerts), len(records)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rules", default=os.path.join(ROOT, "alerts", "dralens.rules.yaml"))
    ap.add_argument("--tests", default=os.path.join(ROOT, "alerts", "tests"))
    ap.add_argument("--runbook", default=os.path.join(ROOT, "alerts", "runbook.md"))
    ap.add_argument("--runbook-base", default=None,
                    help="base of every runbook_url (default: alerts/config.yaml's)")
    ap.add_argument("--catalogue", default=os.path.join(ROOT, "docs", "metrics.md"),
                    help="the generated metric table (docs/metrics.md)")
    ap.add_argument("--expect-violations", default=None,
                    help="comma-separated checks that must fail, and no others")
    args = ap.parse_args()

    problems, n_alerts, n_records = check(args.rules, args.tests, args.runbook, args.catalogue,
                                          args.runbook_base or default_runbook_base())
    for check_name, message in problems:
        print(f"{check_name}: {message}")
    failed = {c for c, _ in problems}
    if args.expect_violations is not None:
        expected = set(filter(None, args.expect_violations.split(",")))
        if failed != expected:
            print(f"expected exactly these checks to fail: {sorted(expected)}; "
                  f"failed: {sorted(failed)}")
            return 1
        print(f"ok: the broken fixture fails exactly {sorted(expected)}")
        return 0
    if problems:
        return 1
    print(f"ok: {n_alerts} alerts and {n_records} recording rules follow the conventions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
