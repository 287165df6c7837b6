#!/usr/bin/python3
"""End to end: `dralens demo --with-prometheus` with a real Prometheus, a real kubectl and an
OTLP/HTTP receiver of our own.

Runs the real binary with a fast workload, free ports and alert rules rendered with short `for:`
durations and thresholds (alerts/render_test_overrides.py), then polls (never timing anything)
until, or fails when the deadline passes before:
  - every query of every dashboard in grafana/ returns data, with the template variables
    resolved the way Grafana resolves them (label_values() through the Prometheus API, "All");
  - /api/v1/query_exemplars on dralens_node_claim_duration_seconds_bucket returns trace ids that
    the OTLP receiver also got;
  - DralensCapacityStranded, DralensClaimUnsatisfiable and DralensGpuIdle (a quarter of the
    demo's pods leave their GPUs idle) have been pending and are firing;
  - the Fleet dashboard's headline stats, evaluated as Grafana would, equal the demo's physical
    truth: 10 GPUs (two H100s in dynamic MIG, eight A100s) split into allocated, free and
    unavailable, and once the scheduled Xid has hit, exactly one unavailable GPU, stranded as
    advertised_unhealthy (the demo has no NotReady node and taints nothing else);
  - kubectl lists the demo's ResourceSlices and ResourceClaims from the embedded API server;
  - GPU utilisation joins with claims: a synthetic dcgm-exporter served here (its series carry
    the demo GPUs' UUIDs, as dcgm-exporter labels them) is scraped by the demo's Prometheus
    (--prometheus-dcgm-targets), and DCGM_FI_DEV_GPU_UTIL joined with dralens_node_claim_info
    on UUID gives each prepared claim its GPU's utilisation;
  - a prepared claim carries our ResourceClaim status.devices entry (read through kubectl);
  - `kubectl get events` shows the cluster role's Events on pending claims, with the funnel of
    each request in the message;
  - the demo's gang (a Workload whose four workers need twelve GPUs together) is reported
    pending, with the devices it lacks and its age;
  - `dralens explain` prints the funnel of a pending claim, and `kubectl dralens explain` (the
    kubectl-dralens link beside the binary, found on the PATH) where an allocated claim landed,
    whether a pod uses it and its cost so far.
Then Ctrl-C (SIGINT) must stop the demo, Prometheus included, with exit code 0.
The stand-ins and clients are in demo_harness.py, the checks in demo_checks.py.

Exit codes: 0 pass, 1 fail, 77 skipped (no prometheus binary).

  demo_e2e.py --dralens build/dralens [--deadline 240]
"""

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

from demo_checks import (ROOT, alert_states, claim_events_problems, device_status_problems,
                         empty_dashboard_queries, exemplar_trace_ids, explain_problems,
                         fleet_headline_problems, gang_problems, join_problems)
from demo_harness import Demo, FakeDcgmExporter, OtlpReceiver, Prometheus, kubectl, log

SKIP = 77

# Short enough that the alerts fire within a minute of data, long enough that "pending" is a real
# state across several evaluations (Prometheus evaluates every 2 s in the demo).
ALERT_FOR = "6s"
THRESHOLDS = {
    "DralensClaimUnsatisfiable": "3",  # seconds a claim pends as unsatisfiable
    "DralensClaimPendingNoCapacity": "3",
    "DralensGpuIdle": "3",  # seconds a running claim's devices have idled (sampled every 1 s)
}
ALERTS_TO_FIRE = ["DralensCapacityStranded", "DralensClaimUnsatisfiable", "DralensGpuIdle"]


def render_rules(out_path):
    cmd = ["/usr/bin/python3", os.path.join(ROOT, "alerts", "render_test_overrides.py"),
           "--for", ALERT_FOR, "-o", out_path]
    for name, value in THRESHOLDS.items():
        cmd += ["--threshold", f"{name}={value}"]
    subprocess.run(cmd, check=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dralens", required=True, help="the dralens binary")
    ap.add_argument("--prometheus", default="/usr/bin/prometheus")
    ap.add_argument("--kubectl", default="/usr/bin/kubectl")
    ap.add_argument("--deadline", type=float, default=240,
                    help="seconds to wait for all the data; a generous bound, never a measure")
    args = ap.parse_args()
    if not os.access(args.prometheus, os.X_OK):
        print(f"SKIP: {args.prometheus} is not installed (Debian package prometheus)")
        return SKIP

    scratch = tempfile.mkdtemp(prefix="dralens-e2e-")
    receiver = OtlpReceiver()
    dcgm = FakeDcgmExporter()
    rules = os.path.join(scratch, "rules.yaml")
    render_rules(rules)
    env = dict(os.environ)
    for k in list(env):
        if k.startswith("OTEL_") or k.startswith("DRALENS_"):
            del env[k]
    env.update({
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
        "OTEL_BSP_SCHEDULE_DELAY": "500",
    })
    # -v: the demo's whole log on its output, which a failure prints.
    argv = [args.dralens, "demo", "-v", "--with-prometheus",
            f"--prometheus-binary={args.prometheus}",
            f"--prometheus-rules={rules}",
            f"--prometheus-dcgm-targets={dcgm.target}",
            "--prometheus-address=127.0.0.1:0",
            "--api-server-address=127.0.0.1:0",
            "--metrics-address=127.0.0.1:0",
            "--demo-seed=7",
            "--demo-claim-interval=500ms",
            "--demo-pod-duration=5s",
            "--utilization-interval=1s",
            "--demo-fault-after=5s"]
    log("starting", " ".join(argv))
    demo = Demo(argv, env)
    failures = []
    start = time.monotonic()
    deadline = start + args.deadline
    try:
        prom_url = api_url = None
        while time.monotonic() < deadline and demo.proc.poll() is None:
            prom_url = demo.find(r"^\s*Prometheus:\s+(http://\S+)")
            api_url = demo.find(r"^\s*API server:\s+(http://\S+)")
            if prom_url and api_url and "Press Ctrl-C" in demo.output():
                break
            time.sleep(0.2)
        if not (prom_url and api_url):
            raise AssertionError("the demo did not print its Prometheus and API server URLs:\n"
                                 + demo.output()[-4000:])
        log("demo up: prometheus", prom_url, "api server", api_url)
        prom = Prometheus(prom_url)
        dcgm.prometheus = prom

        # All four targets (cluster role, two nodes, the DCGM exporter) scraped.
        while True:
            targets = prom.api("targets")["activeTargets"]
            jobs = sorted((t["labels"]["job"], t["health"]) for t in targets)
            if len(targets) == 4 and all(h == "up" for _, h in jobs):
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"targets never all up: {jobs}")
            time.sleep(1)
        assert [j for j, _ in jobs] == ["dcgm-exporter", "dralens-cluster", "dralens-node",
                                        "dralens-node"], jobs
        log("targets up:", jobs)

        missing, shared, states = ["(not checked yet)"], set(), {}
        ids, ex_ids = set(), set()
        join = "(not checked yet)"
        headline = "(not checked yet)"
        while time.monotonic() < deadline:
            if demo.proc.poll() is not None:
                raise AssertionError("the demo exited early:\n" + demo.output()[-4000:])
            missing = empty_dashboard_queries(prom)
            ex_ids = exemplar_trace_ids(prom)
            ids, spans = receiver.snapshot()
            shared = ex_ids & ids
            states = alert_states(prom)
            fired = all({"firing", "was_pending"} <= states.get(a, set()) for a in ALERTS_TO_FIRE)
            join = join_problems(prom)
            headline = fleet_headline_problems(prom)
            log(f"empty queries {len(missing)}, join {'ok' if not join else 'not yet'}, "
                f"fleet headline {'ok' if not headline else 'not yet: ' + headline}, "
                f"exemplars {len(ex_ids)} "
                f"(also received: {len(shared)}), spans {spans}, alerts "
                + ", ".join(f"{a}={sorted(states.get(a, []))}" for a in ALERTS_TO_FIRE))
            if len(missing) <= 3:
                for m in missing:
                    log("  still empty:", m)
            if not missing and shared and fired and not join and not headline:
                break
            time.sleep(3)
        if missing:
            failures.append("queries without data:\n  " + "\n  ".join(missing))
        if not ex_ids:
            failures.append("query_exemplars returned no trace ids")
        elif not shared:
            failures.append(f"no exemplar trace id reached the OTLP receiver: exemplars "
                            f"{sorted(ex_ids)[:5]}, received {sorted(ids)[:5]}")
        for a in ALERTS_TO_FIRE:
            if not {"firing", "was_pending"} <= states.get(a, set()):
                failures.append(f"{a} did not go pending then firing: {sorted(states.get(a, []))}")
        if join:
            failures.append(f"GPU utilisation does not join with claims: {join}")
        if headline:
            failures.append(f"the Fleet headline is not the demo's physical truth: {headline}")
        gang = gang_problems(prom, max(deadline, time.monotonic() + 30))
        if gang:
            failures.append(gang)

        home = os.path.join(scratch, "home")
        os.makedirs(home)
        if not os.access(args.kubectl, os.X_OK):
            # Not in Debian 12's main archive at a current version; the machine image brings it.
            log(f"NOTE: {args.kubectl} is not installed; the kubectl check did not run")
            out = None
        else:
            out = kubectl(args.kubectl, api_url, home, "get", "resourceslices,resourceclaims",
                          "-A")
        if out is None:
            pass
        elif out.returncode != 0:
            failures.append(f"kubectl failed ({out.returncode}): {out.stderr}")
        else:
            log("kubectl:\n" + out.stdout)
            for node in ("dgx-h100-0", "a100-0"):
                if node not in out.stdout:
                    failures.append(f"kubectl lists no ResourceSlice of {node}:\n{out.stdout}")
            for team in ("research", "inference", "notebooks"):
                if not re.search(rf"^{team}\s+\S+", out.stdout, re.M):
                    failures.append(f"kubectl lists no ResourceClaim in namespace {team}:\n"
                                    + out.stdout)
            status = device_status_problems(args.kubectl, api_url, home)
            if status:
                failures.append(status)
            events = claim_events_problems(args.kubectl, api_url, home)
            if events:
                failures.append(events)
            explained = explain_problems(args.dralens, args.kubectl, api_url, home,
                                         max(deadline, time.monotonic() + 60))
            if explained:
                failures.append(explained)
    except Exception as e:  # reported with the demo's output below
        failures.append(f"{type(e).__name__}: {e}")
    finally:
        code = None
        if demo.proc.poll() is None:
            demo.proc.send_signal(signal.SIGINT)
            try:
                code = demo.proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                demo.proc.kill()
                demo.proc.wait()
                failures.append("the demo did not stop within 90 s of SIGINT")
        else:
            code = demo.proc.returncode
        receiver.server.shutdown()
        dcgm.server.shutdown()
    if code not in (0, None):
        failures.append(f"the demo exited with code {code}")
    if prom_url := demo.find(r"^\s*Prometheus:\s+(http://\S+)"):
        try:
            urllib.request.urlopen(prom_url + "/-/ready", timeout=5)
            failures.append("Prometheus still answers after the demo stopped")
        except (urllib.error.URLError, OSError):
            pass
    log(f"finished after {time.monotonic() - start:.0f} s")
    if failures:
        print("\n--- demo output (tail) ---\n" + demo.output()[-8000:], file=sys.stderr)
        print("\nFAILED:\n- " + "\n- ".join(failures), file=sys.stderr)
        return 1
    shutil.rmtree(scratch, ignore_errors=True)
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
