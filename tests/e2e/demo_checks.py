"""The end-to-end test's checks against the running demo: every dashboard query with its
variables resolved as Grafana would, the Fleet headline against the demo's physical truth, the
utilisation join, exemplars, alert states, and what kubectl, the Events, the gang and
`dralens explain` show. Each *_problems function returns "" when its check holds, else why not."""
import glob
import json
import os
import re
import subprocess
import time

from demo_harness import FakeDcgmExporter, kubectl, log

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

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
