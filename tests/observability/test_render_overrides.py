#!/usr/bin/python3
"""Renders the rules with a short for: and a low threshold, then proves with promtool that the
rendered alert fires within minutes and that nothing else in the file changed."""

import os
import subprocess
import sys
import tempfile

import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(ROOT, "alerts", "render_test_overrides.py")
RULES = os.path.join(ROOT, "alerts", "dralens.rules.yaml")
PROMTOOL = sys.argv[1] if len(sys.argv) > 1 else "promtool"

TEST = """
rule_files: [rendered.yaml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'dralens_cluster_pending_claim_age_seconds{namespace="ml", claim="c", device_class="gpu.dralens.dev", reason="no_capacity"}'
        values: '0+60x10'
    alert_rule_test:
      # Age 120 > 60 from 2m; for: 1m.
      - eval_time: 2m
        alertname: DralensClaimPendingNoCapacity
      - eval_time: 3m
        alertname: DralensClaimPendingNoCapacity
        exp_alerts:
          - exp_labels: {severity: warning, namespace: ml, claim: c, device_class: gpu.dralens.dev}
            exp_annotations:
              summary: A ResourceClaim pends because no device is free.
              description: "ml/c (class gpu.dralens.dev) has been pending for 3m 0s: every device that could satisfy it is taken."
              runbook_url: https://example.test/runbook.md#dralensclaimpendingnocapacity
"""


def fail(message):
    print(f"FAIL: {message}")
    sys.exit(1)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rendered.yaml")
        subprocess.run([sys.executable, SCRIPT, "--for", "1m", "--threshold",
                        "DralensClaimPendingNoCapacity=60", "--node-job", "e2e-node",
                        "--runbook-base", "https://example.test/runbook.md", "-o", out],
                       check=True)
        subprocess.run([PROMTOOL, "check", "rules", out], check=True)
        with open(os.path.join(tmp, "test.yaml"), "w") as f:
            f.write(TEST)
        subprocess.run([PROMTOOL, "test", "rules", os.path.join(tmp, "test.yaml")], check=True)

        before = yaml.safe_load(open(RULES))
        after = yaml.safe_load(open(out))
        old = {r.get("alert") or r["record"]: r for g in before["groups"] for r in g["rules"]}
        new = {r.get("alert") or r["record"]: r for g in after["groups"] for r in g["rules"]}
        if old.keys() != new.keys():
            fail("the rendered file has other rules")
        for name, rule in new.items():
            if "alert" in rule and rule["for"] != "1m":
                fail(f"{name}: for: is {rule['for']}, not 1m")
            if "record" in rule and rule != old[name]:
                fail(f"recording rule {name} changed")
        if "> 60  # threshold" not in new["DralensClaimPendingNoCapacity"]["expr"]:
            fail("the threshold was not replaced")
        if "> 10  # threshold" not in new["DralensPrepareSlow"]["expr"]:
            fail("another alert's threshold changed")
        if 'job="e2e-node"' not in new["DralensNodeDown"]["expr"]:
            fail("the node job was not replaced")

        # Bad input is refused with a message that names it.
        for bad, words in ((["--threshold", "NoSuchAlert=1"], "unknown alert"),
                           (["--threshold", "DralensNodeDown=1"], "has no threshold"),
                           (["--for", "soon"], "not a Prometheus duration")):
            r = subprocess.run([sys.executable, SCRIPT, *bad, "-o", os.devnull],
                               capture_output=True, text=True)
            if r.returncode == 0 or words not in r.stderr:
                fail(f"{bad}: expected an error with {words!r}, got {r.returncode} {r.stderr!r}")
    print("ok: overrides render, pass promtool and fire as configured")


if __name__ == "__main__":
    main()
