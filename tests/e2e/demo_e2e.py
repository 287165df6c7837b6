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

Exit codes: 0 pass, 1 fail, 77 skipped (no prometheus binary).

  demo_e2e.py --dralens build/dralens [--deadline 240]
"""

import argparse
import glob
import gzip
import http.server
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
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

# Grafana's built-in range variables, with values that suit a run of a minute or two.
BUILTINS = {"__rate_interval": "30s", "__interval": "10s", "__range": "10m"}

# Dashboard panels (file, title) whose queries cannot have data in the demo, with the reason.
# Keep it short; an entry whose query does return data is reported as stale.
ALLOWED_EMPTY: dict = {}

# Beyond the dashboards: the demo's scheduled Xid must show up on both sides.
FAULT_QUERIES = [
    'dralens_device_state{job="dralens-node", state="unhealthy"} == 1',
    'dralens_cluster_gpus{job="dralens-cluster", state="unavailable"} > 0',
    'dralens_cluster_stranded_gpus{job="dralens-cluster", kind="advertised_unhealthy"} > 0',
]

# The demo's physical GPUs with the default --demo-nodes=2: dgx-h100-0 (two H100 80GB in
# dynamic MIG, published as two counter sets with their placements) and a100-0 (eight A100).
DEMO_GPUS = 10
# After --demo-fault-after, one A100 is tainted: one GPU unavailable, nothing else.
DEMO_UNAVAILABLE_AFTER_FAULT = 1


def log(*args):
    print(time.strftime("%H:%M:%S"), *args, flush=True)


class FakeDcgmExporter:
    """Serves DCGM_FI_DEV_GPU_UTIL for the demo's GPUs as dcgm-exporter labels it (gpu, UUID,
    pci_bus_id, device, modelName, Hostname), with a utilisation derived from the UUID, so the
    join's values can be checked. The GPUs are learnt from the demo's Prometheus
    (dralens_device_info) once it answers; until then the body is empty."""

    def __init__(self):
        self.prometheus = None
        exporter = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                body = exporter.render().encode()
                self.send_response(200 if self.path == "/metrics" else 404)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.target = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @staticmethod
    def utilisation(uuid):
        return sum(uuid.encode()) % 97 + 1

    def render(self):
        lines = ["# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).",
                 "# TYPE DCGM_FI_DEV_GPU_UTIL gauge"]
        if self.prometheus is not None:
            try:
                gpus = self.prometheus.query('dralens_device_info{type="gpu"}')
            except Exception:  # Prometheus not ready yet: nothing to serve
                gpus = []
            for i, r in enumerate(sorted(gpus, key=lambda r: r["metric"]["uuid"])):
                m = r["metric"]
                node = m["instance"]
                lines.append(
                    f'DCGM_FI_DEV_GPU_UTIL{{gpu="{i}",UUID="{m["uuid"]}",'
                    f'pci_bus_id="{m.get("pci_bus_id", "")}",device="nvidia{i}",'
                    f'modelName="{m.get("product", "")}",Hostname="{node}"}} '
                    f'{self.utilisation(m["uuid"])}')
        return "\n".join(lines) + "\n"


JOIN = ('dralens_node_claim_info * on (UUID, GPU_I_ID) group_left () '
        'max by (UUID, GPU_I_ID) (DCGM_FI_DEV_GPU_UTIL)')


def join_problems(prom):
    """"" when the utilisation join gives prepared claims their GPUs' values, else why not."""
    joined = prom.query(JOIN)
    if not joined:
        return "the join of DCGM_FI_DEV_GPU_UTIL with dralens_node_claim_info is empty"
    for r in joined:
        m = r["metric"]
        for label in ("namespace", "claim", "uid", "dra_claim_name", "dra_device_name"):
            if not m.get(label):
                return f"a joined series lacks {label}: {m}"
        want = FakeDcgmExporter.utilisation(m["UUID"])
        if float(r["value"][1]) != want:
            return f"claim {m['claim']} on {m['UUID']}: {r['value'][1]}, want {want}"
    return ""


class OtlpReceiver:
    """OTLP/HTTP JSON on loopback: records the trace ids of every span it is sent."""

    def __init__(self):
        self.trace_ids = set()
        self.spans = 0
        self.lock = threading.Lock()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding", "") == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                try:
                    doc = json.loads(body)
                except ValueError:
                    self.send_response(400)
                    self.end_headers()
                    return
                receiver.record(doc)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def record(self, doc):
        with self.lock:
            for rs in doc.get("resourceSpans", []):
                for ss in rs.get("scopeSpans", []):
                    for span in ss.get("spans", []):
                        self.spans += 1
                        self.trace_ids.add(span["traceId"].lower())

    def snapshot(self):
        with self.lock:
            return set(self.trace_ids), self.spans


class Demo:
    """The dralens demo process; its output is collected on a thread."""

    def __init__(self, argv, env):
        self.proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, bufsize=1)
        self.lines = []
        self.lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            with self.lock:
                self.lines.append(line)

    def output(self):
        with self.lock:
            return "".join(self.lines)

    def find(self, pattern):
        m = re.search(pattern, self.output(), re.M)
        return m.group(1) if m else None


def get_json(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.load(r)


class Prometheus:
    def __init__(self, url):
        self.url = url

    def api(self, path, **params):
        query = urllib.parse.urlencode(params, doseq=True)
        doc = get_json(f"{self.url}/api/v1/{path}?{query}")
        if doc.get("status") != "success":
            raise RuntimeError(f"{path} {params}: {doc}")
        return doc["data"]

    def query(self, expr):
        return self.api("query", query=expr)["result"]


def substitute(expr, values):
    def repl(m):
        name = m.group(1) or m.group(2)
        if name not in values:
            raise KeyError(f"unknown variable ${name} in {expr!r}")
        return values[name]
    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::[a-z]+)?\}|\$([A-Za-z_][A-Za-z0-9_]*)",
                  repl, expr)


def resolve_variables(prom, dashboard):
    """The values Grafana would use with "All" selected: label_values() through the API."""
    values = dict(BUILTINS)
    for var in dashboard.get("templating", {}).get("list", []):
        name = var["name"]
        if var.get("type") == "datasource":
            values[name] = "prometheus"
            continue
        query = var.get("query")
        if isinstance(query, dict):
            query = query.get("query", "")
        m = re.fullmatch(r"\s*label_values\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\)\s*", query or "")
        if not m:
            raise ValueError(f"variable {name}: unsupported query {query!r}")
        match = substitute(m.group(1), values)
        found = prom.api(f"label/{m.group(2)}/values", **{"match[]": match})
        if not found:
            return None, f"variable ${name}: label_values({match}, {m.group(2)}) is empty"
        values[name] = "(" + "|".join(re.escape(v).replace("\\", "\\\\") for v in found) + ")"
    return values, None


def dashboard_queries():
    for path in sorted(glob.glob(os.path.join(ROOT, "grafana", "*.json"))):
        with open(path, encoding="utf-8") as f:
            dashboard = json.load(f)
        panels = []
        for p in dashboard.get("panels", []):
            panels.append(p)
            panels.extend(p.get("panels", []) or [])
        targets = [(p.get("title", ""), t["expr"]) for p in panels for t in p.get("targets", [])
                   if t.get("expr")]
        yield os.path.basename(path), dashboard, targets


def empty_dashboard_queries(prom):
    """Every dashboard query that returns nothing yet, as 'dashboard / panel: expr' lines."""
    missing = []
    for name, dashboard, targets in dashboard_queries():
        values, why = resolve_variables(prom, dashboard)
        if values is None:
            missing.append(f"{name}: {why}")
            continue
        for title, expr in targets:
            has_data = bool(prom.query(substitute(expr, values)))
            if (name, title) in ALLOWED_EMPTY:
                if has_data:
                    missing.append(f"{name} / {title}: has data now; drop it from ALLOWED_EMPTY")
                continue
            if not has_data:
                missing.append(f"{name} / {title}: {expr}")
    for expr in FAULT_QUERIES:
        if not prom.query(expr):
            missing.append(f"fault not visible: {expr}")
    return missing


def fleet_headline_problems(prom):
    """"" when the Fleet dashboard's headline stats equal the demo's physical truth, else why
    not. The stats are read from grafana/fleet.json and evaluated with "All" selected."""
    with open(os.path.join(ROOT, "grafana", "fleet.json"), encoding="utf-8") as f:
        dashboard = json.load(f)
    values, why = resolve_variables(prom, dashboard)
    if values is None:
        return why
    stats = {}
    for p in dashboard.get("panels", []):
        for panel in [p] + (p.get("panels", []) or []):
            if panel.get("type") == "stat":
                expr = panel["targets"][0]["expr"]
                result = prom.query(substitute(expr, values))
                stats[panel["title"]] = float(result[0]["value"][1]) if result else None
    for title in ("GPUs", "Allocated GPUs", "Free GPUs", "Unavailable GPUs", "Stranded GPUs"):
        if title not in stats:
            return f"the Fleet dashboard has no stat {title!r}"
    if stats["GPUs"] != DEMO_GPUS:
        return f"Fleet GPUs stat is {stats['GPUs']}, the demo has {DEMO_GPUS} GPUs"
    parts = sum(stats[t] or 0 for t in ("Allocated GPUs", "Free GPUs", "Unavailable GPUs"))
    if abs(parts - DEMO_GPUS) > 1e-6:
        return f"allocated + free + unavailable GPUs = {parts}, not {DEMO_GPUS}: {stats}"
    if stats["Unavailable GPUs"] != DEMO_UNAVAILABLE_AFTER_FAULT:
        return f"Fleet unavailable GPUs stat is {stats['Unavailable GPUs']} (fault not seen yet?)"
    unhealthy = prom.query('sum(dralens_cluster_stranded_gpus{kind="advertised_unhealthy"})')
    if not unhealthy or float(unhealthy[0]["value"][1]) != DEMO_UNAVAILABLE_AFTER_FAULT:
        return f"stranded advertised_unhealthy GPUs: {unhealthy}"
    if (stats["Stranded GPUs"] or 0) > DEMO_GPUS:
        return f"Fleet stranded GPUs stat {stats['Stranded GPUs']} exceeds the GPUs"
    return showback_problems(prom)


def showback_problems(prom):
    """"" when every namespace with a claim in use is billed for it, else why not."""
    in_use = {r["metric"]["namespace"] for r in prom.query(
        'sum by (namespace) (dralens_cluster_claims{state="in_use"}) > 0')}
    billed = {r["metric"]["namespace"] for r in prom.query(
        'sum by (namespace) (dralens_cluster_cost_total{state="in_use"}) > 0')}
    if not in_use:
        return "no claim is in use"
    if in_use - billed:
        return f"namespaces with claims in use but no in_use cost: {sorted(in_use - billed)}"
    if len(billed) < 2:
        return f"the demo's teams are not all billed yet: {sorted(billed)}"
    return topology_problems(prom)


def topology_problems(prom):
    """"" once the demo's two-GPU job was seen spread across NUMA nodes in a topology-sensitive
    class (it is the workload's first claim, on two GPUs under different sockets)."""
    spread = prom.query('max_over_time(dralens_cluster_claim_spread'
                        '{spread="cross_numa", topology_sensitive="true"}[1h])')
    if not spread:
        return "no topology-sensitive claim seen cross_numa"
    counted = prom.query('max_over_time(dralens_cluster_claim_topology{spread="cross_numa"}[1h]) > 0')
    if not counted:
        return "dralens_cluster_claim_topology never counted the cross_numa claim"
    return ""


def exemplar_trace_ids(prom):
    now = time.time()
    data = prom.api("query_exemplars", query="dralens_node_claim_duration_seconds_bucket",
                    start=f"{now - 3600:.3f}", end=f"{now + 60:.3f}")
    ids = set()
    for series in data:
        for ex in series.get("exemplars", []):
            tid = ex.get("labels", {}).get("trace_id")
            if tid:
                ids.add(tid.lower())
    return ids


def alert_states(prom):
    """{alertname: {"firing", "pending"}} now, plus "was_pending" from the ALERTS history."""
    states = {}
    for a in prom.api("alerts")["alerts"]:
        states.setdefault(a["labels"]["alertname"], set()).add(a["state"])
    for r in prom.query('max_over_time(ALERTS{alertstate="pending"}[1h])'):
        states.setdefault(r["metric"]["alertname"], set()).add("was_pending")
    return states


def kubectl(kubectl_path, server, home, *args):
    env = {"HOME": home, "PATH": "/usr/bin:/bin", "KUBECONFIG": os.path.join(home, "none")}
    return subprocess.run([kubectl_path, "--server", server, "--request-timeout=20s", *args],
                          env=env, capture_output=True, text=True, timeout=60)


def device_status_problems(kubectl_path, server, home):
    """"" when some claim of the demo carries our Ready status.devices entry."""
    out = kubectl(kubectl_path, server, home, "get", "resourceclaims", "-A", "-o", "json")
    if out.returncode != 0:
        return f"kubectl get resourceclaims failed ({out.returncode}): {out.stderr}"
    for claim in json.loads(out.stdout).get("items", []):
        for entry in claim.get("status", {}).get("devices", []) or []:
            ready = [c for c in entry.get("conditions", []) if c.get("type") == "Ready"]
            if (entry.get("driver") == "gpu.dralens.dev" and ready
                    and ready[0].get("status") == "True" and entry.get("data", {}).get("uuid")):
                return ""
    return "no ResourceClaim carries a Ready status.devices entry of gpu.dralens.dev"


FUNNEL = re.compile(r"class \S+: \d+ devices?; \d+ match the request's selectors; \d+ untainted; "
                    r"\d+ free")


def claim_events_problems(kubectl_path, server, home):
    """"" when kubectl shows an Event of the cluster role on a pending claim, with its funnel."""
    out = kubectl(kubectl_path, server, home, "get", "events", "-A", "-o", "json")
    if out.returncode != 0:
        return f"kubectl get events failed ({out.returncode}): {out.stderr}"
    ours = [e for e in json.loads(out.stdout).get("items", [])
            if e.get("reportingComponent") == "dralens.dev/cluster"
            and e.get("involvedObject", {}).get("kind") == "ResourceClaim"]
    if not ours:
        return "kubectl get events shows no Event of dralens.dev/cluster on a ResourceClaim"
    bad = [e for e in ours if not FUNNEL.search(e.get("message", ""))
           or e.get("reason") not in ("Unsatisfiable", "Unknown", "Tainted", "NoCapacity",
                                      "WaitingForPod")]
    if bad:
        return f"an Event without the funnel: {bad[0]}"
    table = kubectl(kubectl_path, server, home, "get", "events", "-A")
    if table.returncode != 0 or "resourceclaim/" not in table.stdout \
            or not FUNNEL.search(table.stdout):
        return f"kubectl get events does not print the funnel:\n{table.stdout}{table.stderr}"
    log(f"claim events: {len(ours)}, e.g. {ours[0]['reason']}: {ours[0]['message']}")
    return ""


def gang_problems(prom, deadline):
    """"" once Prometheus has the demo's pending gang, short of devices and ageing."""
    got = "(no query yet)"
    while time.monotonic() < deadline:
        short = prom.query('dralens_cluster_pending_gang_short_devices{workload="train-llm"}')
        age = prom.query('dralens_cluster_pending_gang_age_seconds{workload="train-llm"}')
        count = prom.query('sum(dralens_cluster_pending_gangs{namespace="research"})')
        got = f"short {short}, age {age}, count {count}"
        if (short and float(short[0]["value"][1]) >= 2 and age
                and float(age[0]["value"][1]) > 0 and count
                and float(count[0]["value"][1]) >= 1):
            log("gang:", got)
            return ""
        time.sleep(2)
    return f"the demo's gang is not reported pending and short: {got}"


def explain_problems(dralens, kubectl_path, server, home, deadline):
    """"" once `dralens explain` has explained a pending claim and, through kubectl, an
    allocated one."""
    want = {"pending": None, "allocated": None}
    plugin_env = {"HOME": home, "KUBECONFIG": os.path.join(home, "none"),
                  "PATH": os.path.dirname(os.path.abspath(dralens)) + ":/usr/bin:/bin"}
    while time.monotonic() < deadline and not all(want.values()):
        out = kubectl(kubectl_path, server, home, "get", "resourceclaims", "-A", "-o", "json")
        if out.returncode != 0:
            return f"kubectl get resourceclaims failed: {out.stderr}"
        for claim in json.loads(out.stdout).get("items", []):
            kind = "allocated" if claim.get("status", {}).get("allocation") else "pending"
            if want[kind]:
                continue
            ns, name = claim["metadata"]["namespace"], claim["metadata"]["name"]
            args = ["explain", "-n", ns, name, f"--server={server}",
                    "--price-per-device-hour=2.5"]
            if kind == "pending":
                run = subprocess.run([dralens, *args], capture_output=True, text=True,
                                     timeout=90, env=plugin_env)
                ok = "State:    pending" in run.stdout and FUNNEL.search(run.stdout)
            else:
                run = subprocess.run([kubectl_path, "dralens", *args], capture_output=True,
                                     text=True, timeout=90, env=plugin_env)
                ok = ("Devices:" in run.stdout and " on " in run.stdout
                      and re.search(r"Cost:\s+\d+\.\d\d so far", run.stdout)
                      and "Used by:" in run.stdout)
            if run.returncode != 0:
                log(f"explain {ns}/{name} ({kind}) exited {run.returncode}: {run.stderr}")
            elif ok:
                want[kind] = run.stdout
                log(f"explain ({kind}):\n{run.stdout}")
            # Otherwise the claim moved on between the list and the explanation: try another.
        time.sleep(1)
    missing = [k for k, v in want.items() if not v]
    if missing:
        return f"no explanation of a {' or '.join(missing)} claim"
    # A claim of the gang's pods: its explanation names the gang and what it lacks together.
    run = subprocess.run([dralens, "explain", "-n", "research", "train-llm-worker-0",
                          f"--server={server}"], capture_output=True, text=True, timeout=90,
                         env=plugin_env)
    if not re.search(r"Gang:\s+research/train-llm pod group workers: 0 of 4 pods scheduled, "
                     r"needs 4; its pending claims, evaluated together, lack \d+ devices",
                     run.stdout):
        return f"the gang claim's explanation does not name its gang:\n{run.stdout}{run.stderr}"
    log(f"explain (gang claim):\n{run.stdout}")
    return ""


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
