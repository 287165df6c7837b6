#!/usr/bin/python3
"""Renders the rules of alerts/config.yaml with other `for:` durations, thresholds, node job name
or runbook base, for end-to-end tests that cannot wait 15 minutes (or for a site's own tuning
without the chart). It builds the rules the way alerts/generate.py does; only the settings
named change.

  render_test_overrides.py --for 30s --threshold DralensPrepareSlow=0.5 -o /tmp/rules.yaml
  render_test_overrides.py --for DralensCapacityStranded=1m --node-job my-node-job
  render_test_overrides.py --list

--for DURATION sets every alert's for:; --for ALERT=DURATION one alert's (it wins).
"""

import argparse
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import generate  # noqa: E402

NUMBER = re.compile(r"^-?\d+(\.\d+)?([eE][-+]?\d+)?$")


def split_assignment(flag, text):
    name, sep, value = text.partition("=")
    if not sep or not name or not value:
        raise SystemExit(f"{flag} {text!r}: expected ALERT=VALUE")
    return name, value


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=generate.CONFIG)
    ap.add_argument("-o", "--output", default="-", help="output file (default stdout)")
    ap.add_argument("--for", dest="for_", action="append", default=[],
                    help="DURATION for every alert, or ALERT=DURATION")
    ap.add_argument("--threshold", action="append", default=[], help="ALERT=NUMBER")
    ap.add_argument("--node-job", help="job name of the node plugin targets")
    ap.add_argument("--runbook-base", help="base URL of every runbook_url")
    ap.add_argument("--list", action="store_true", help="print each alert's for: and threshold")
    args = ap.parse_args()

    try:
        config = generate.load(args.config)
    except generate.ConfigError as e:
        raise SystemExit(f"{args.config}: {e}")
    alerts = {a["alert"]: a for a in generate.alerts(config)}

    if args.list:
        for name, a in alerts.items():
            t = generate.format_number(a["threshold"]) if "threshold" in a else "-"
            print(f"{name}\tfor={a['for']}\tthreshold={t}")
        return 0

    overrides = {"for": {}, "threshold": {}}
    all_for = None
    for item in args.for_:
        if "=" in item:
            name, value = split_assignment("--for", item)
            overrides["for"][name] = value
        else:
            all_for = item
    for value in [all_for] + list(overrides["for"].values()):
        if value is not None and not generate.DURATION.match(value):
            raise SystemExit(f"--for: {value!r} is not a Prometheus duration")
    for t in args.threshold:
        name, value = split_assignment("--threshold", t)
        if not NUMBER.match(value):
            raise SystemExit(f"--threshold {name}: {value!r} is not a number")
        overrides["threshold"][name] = float(value) if re.search(r"[.eE]", value) else int(value)
    for name in list(overrides["for"]) + list(overrides["threshold"]):
        if name not in alerts:
            raise SystemExit(f"unknown alert {name!r} (known: {', '.join(sorted(alerts))})")
    for name in overrides["threshold"]:
        if "threshold" not in alerts[name]:
            raise SystemExit(f"--threshold {name}: the alert has no threshold")
    if all_for is not None:
        overrides["for"] = {n: overrides["for"].get(n, all_for) for n in alerts}
    if args.node_job:
        node = config["selectors"]["node"]
        if not re.search(r'job="[^"]*"', node):
            raise SystemExit(f"--node-job: the node selector {node!r} names no job")
        overrides["selectors"] = {"node": re.sub(r'job="[^"]*"', f'job="{args.node_job}"', node)}
    if args.runbook_base:
        overrides["runbookBaseUrl"] = args.runbook_base

    header = ("# dralens Prometheus rules rendered by alerts/render_test_overrides.py from "
              "alerts/config.yaml\n# with: " + " ".join(sys.argv[1:]) + "\n")
    text = generate.rules_text(generate.rules(config, overrides), header)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
