#!/usr/bin/python3
"""Writes a copy of dralens.rules.yaml with other `for:` durations, thresholds, node job name or
runbook base, for end-to-end tests that cannot wait 15 minutes (or for a site's own tuning).

Each alert's threshold is the number on the line of its expression that ends in "# threshold";
its `for:` is the rule's own field. Nothing else is touched.

  render_test_overrides.py --for 30s --threshold DralensPrepareSlow=0.5 -o /tmp/rules.yaml
  render_test_overrides.py --for DralensCapacityStranded=1m --node-job my-node-job
  render_test_overrides.py --list

--for DURATION sets every alert's for:; --for ALERT=DURATION one alert's (it wins).
"""

import argparse
import os
import re
import sys

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
THRESHOLD = re.compile(r"(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)(\s*#\s*threshold\s*)$", re.M)
DURATION = re.compile(r"^(\d+(ms|s|m|h|d|w|y))+$")
NUMBER = re.compile(r"^-?\d+(\.\d+)?([eE][-+]?\d+)?$")
NODE_JOB = 'job="dralens-node"'
RUNBOOK = "alerts/runbook.md"


def split_assignment(flag, text):
    name, sep, value = text.partition("=")
    if not sep or not name or not value:
        raise SystemExit(f"{flag} {text!r}: expected ALERT=VALUE")
    return name, value


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rules", default=os.path.join(HERE, "dralens.rules.yaml"))
    ap.add_argument("-o", "--output", default="-", help="output file (default stdout)")
    ap.add_argument("--for", dest="for_", action="append", default=[],
                    help="DURATION for every alert, or ALERT=DURATION")
    ap.add_argument("--threshold", action="append", default=[], help="ALERT=NUMBER")
    ap.add_argument("--node-job", help="job name of the node plugin targets")
    ap.add_argument("--runbook-base", help=f"replaces {RUNBOOK} in every runbook_url")
    ap.add_argument("--list", action="store_true", help="print each alert's for: and threshold")
    args = ap.parse_args()

    doc = yaml.safe_load(open(args.rules, encoding="utf-8"))
    alerts = {r["alert"]: r for g in doc["groups"] for r in g["rules"] if "alert" in r}

    if args.list:
        for name, rule in alerts.items():
            m = THRESHOLD.search(rule["expr"])
            print(f"{name}\tfor={rule.get('for', '0s')}\tthreshold={m.group(1) if m else '-'}")
        return 0

    all_for, per_alert_for = None, {}
    for item in args.for_:
        if "=" in item:
            name, value = split_assignment("--for", item)
            per_alert_for[name] = value
        else:
            all_for = item
    for value in [all_for] + list(per_alert_for.values()):
        if value is not None and not DURATION.match(value):
            raise SystemExit(f"--for: {value!r} is not a Prometheus duration")
    thresholds = dict(split_assignment("--threshold", t) for t in args.threshold)
    for name, value in thresholds.items():
        if not NUMBER.match(value):
            raise SystemExit(f"--threshold {name}: {value!r} is not a number")
    for name in list(per_alert_for) + list(thresholds):
        if name not in alerts:
            raise SystemExit(f"unknown alert {name!r} (known: {', '.join(sorted(alerts))})")

    for group in doc["groups"]:
        for rule in group["rules"]:
            if args.node_job:
                rule["expr"] = rule["expr"].replace(NODE_JOB, f'job="{args.node_job}"')
            name = rule.get("alert")
            if name is None:
                continue
            if name in per_alert_for or all_for is not None:
                rule["for"] = per_alert_for.get(name, all_for)
            if name in thresholds:
                expr, count = THRESHOLD.subn(lambda m: thresholds[name] + m.group(2), rule["expr"])
                if count != 1:
                    raise SystemExit(f"--threshold {name}: the alert has no '# threshold' line")
                rule["expr"] = expr
            if args.runbook_base:
                ann = rule.get("annotations", {})
                ann["runbook_url"] = ann["runbook_url"].replace(RUNBOOK, args.runbook_base)

    text = yaml.safe_dump(doc, sort_keys=False, width=100, allow_unicode=True)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
