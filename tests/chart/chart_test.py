#!/usr/bin/python3
"""Renders charts/dralens with Helm's own template engines (tests/chart/render, Go text/template
plus sprig) for the default values and every variant in tests/chart/values/, and checks what
comes out: well-formed objects, least-privilege RBAC, node flags and mounts against the CLI
contract in the README, monitoring objects equal to the files they are built from, and that every
values.yaml key is documented, used by a template and validated by values.schema.json.

Usage: chart_test.py [--build-dir DIR] [unittest args]
       chart_test.py --print-values-table | --write-values-table
The renderer is built into --build-dir (default: a temporary directory) with the Debian Go
packages in GOPATH mode; nothing is fetched.
"""
import argparse
import copy
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import jsonschema
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "dralens"
HERE = ROOT / "tests" / "chart"
sys.path.insert(0, str(ROOT / "charts"))
sys.path.insert(0, str(ROOT / "alerts"))
import chart_files  # noqa: E402
import generate as alerts_generate  # noqa: E402

ARGS = argparse.Namespace(build_dir=None)
RENDER = None
NAMESPACE = "dralens-system"

# Flags of `dralens cluster` that the cluster role is gaining in parallel work and that the
# README table may not list yet. A flag listed here that the table does hold is checked like
# any other flag.
# Cluster-role flags the chart may pass before the CLI has them (none: all exist now).
PENDING_CLUSTER_FLAGS: set = set()

# What the node role calls on the API server (see templates/rbac-node.yaml for where).
NODE_RULES = {
    ("resource.k8s.io", "resourceslices"): {"list", "create", "update", "delete"},
    ("resource.k8s.io", "resourceclaims"): {"get"},
    ("resource.k8s.io", "resourceclaims/status"): {"update"},
    ("resource.k8s.io", "resourceclaims/driver"): {"associated-node:update"},
    ("", "nodes"): {"get"},
}
CLUSTER_RULES = {
    ("resource.k8s.io", "resourceclaims"): {"list", "watch"},
    ("resource.k8s.io", "resourceslices"): {"list", "watch"},
    ("resource.k8s.io", "deviceclasses"): {"list", "watch"},
    ("", "pods"): {"list", "watch"},
    ("", "nodes"): {"list", "watch"},
    # The Events on pending claims (cluster.claimEvents, on by default).
    ("events.k8s.io", "events"): {"create", "patch"},
    # Gangs, where the API server serves Workloads (Kubernetes 1.35+).
    ("scheduling.k8s.io", "workloads"): {"list", "watch"},
}
NAMESPACED = {"DaemonSet", "Deployment", "ServiceAccount", "Service", "ServiceMonitor",
              "PrometheusRule", "ConfigMap", "Role", "RoleBinding"}
CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy",
                  "ValidatingAdmissionPolicyBinding", "DeviceClass"}
API_VERSIONS = {
    "DaemonSet": "apps/v1", "Deployment": "apps/v1", "ServiceAccount": "v1", "Service": "v1",
    "ConfigMap": "v1", "ServiceMonitor": "monitoring.coreos.com/v1",
    "PrometheusRule": "monitoring.coreos.com/v1", "Role": "rbac.authorization.k8s.io/v1",
    "RoleBinding": "rbac.authorization.k8s.io/v1", "ClusterRole": "rbac.authorization.k8s.io/v1",
    "ClusterRoleBinding": "rbac.authorization.k8s.io/v1",
    "ValidatingAdmissionPolicy": "admissionregistration.k8s.io/v1",
    "ValidatingAdmissionPolicyBinding": "admissionregistration.k8s.io/v1",
    "DeviceClass": "resource.k8s.io/v1",
}
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def variants():
    """(name, values files) for the defaults and each file in tests/chart/values/."""
    out = [("default", [])]
    for f in sorted((HERE / "values").glob("*.yaml")):
        out.append((f.stem, [f]))
    return out


def build_renderer(build_dir):
    out = pathlib.Path(build_dir) / "chart-render"
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, GO111MODULE="off", GOPATH="/usr/share/gocode",
               GOCACHE=str(out / "gocache"), CGO_ENABLED="0")
    go = shutil.which("go") or "/usr/lib/go/bin/go"
    subprocess.run([go, "build", "-o", str(out / "render"), "."], env=env,
                   check=True, cwd=str(HERE / "render"))
    return str(out / "render")


def render_raw(files=(), chart=CHART, notes=False, strict=True):
    cmd = [RENDER, "-chart", str(chart), "-namespace", NAMESPACE]
    for f in files:
        cmd += ["-f", str(f)]
    if strict:
        cmd.append("-strict")
    if notes:
        cmd.append("-notes")
    return subprocess.run(cmd, capture_output=True, text=True)


def render(files=(), chart=CHART):
    res = render_raw(files, chart)
    if res.returncode != 0:
        raise AssertionError(f"render {[str(f) for f in files]} failed: {res.stderr}")
    return res.stdout, [d for d in yaml.safe_load_all(res.stdout) if d is not None]


def merge(base, over):
    """Helm's coalescing of user values: maps merge, null deletes, anything else replaces."""
    out = copy.deepcopy(base)
    for k, v in over.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def load_values(files=()):
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    for f in files:
        values = merge(values, yaml.safe_load(pathlib.Path(f).read_text()) or {})
    return values


def schema():
    return json.loads((CHART / "values.schema.json").read_text())


def alert_overrides(alert_values):
    """The chart's alerts.* values as alerts/generate.py overrides."""
    out = {"runbookBaseUrl": alert_values["runbookBaseUrl"]}
    for name, settings in alert_values.items():
        if isinstance(settings, dict):
            for key, value in settings.items():
                out.setdefault(key, {})[name] = value
    return out


def by_kind(docs, kind):
    return [d for d in docs if d["kind"] == kind]


def one(docs, kind, name_suffix=""):
    found = [d for d in by_kind(docs, kind) if d["metadata"]["name"].endswith(name_suffix)]
    if len(found) != 1:
        raise AssertionError(f"expected one {kind} *{name_suffix}, found {len(found)}")
    return found[0]


def parse_args(args):
    """--name=value pairs of a container's args after the role word."""
    out = {}
    for a in args:
        m = re.fullmatch(r"--([a-z0-9-]+)(?:=(.*))?", a)
        if not m:
            raise AssertionError(f"argument {a!r} is not a --flag[=value]")
        out[m.group(1)] = m.group(2) if m.group(2) is not None else "true"
    return out


def cli_contract():
    """The README's generated flags table: flag -> (env, default, roles)."""
    text = (ROOT / "README.md").read_text()
    m = re.search(r"<!-- flags:begin -->\n(.*?)<!-- flags:end -->", text, re.S)
    if not m:
        raise AssertionError("README.md has no flags table between the flags markers")
    flags = {}
    for line in m.group(1).splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        name = cells[0].strip("`").lstrip("-")
        roles = {r.strip() for r in cells[3].split(",")}
        flags[name] = (cells[1].strip("`"), cells[2].strip("`"), roles)
    if len(flags) < 5:
        raise AssertionError("the README flags table parsed to almost nothing")
    return flags


# ---- values.yaml documentation ----

KEY_LINE = re.compile(r"^(\s*)([A-Za-z0-9_.]+):(.*)$")


def documented_keys(text):
    """Maps each key path of values.yaml preceded by a `# --` comment to its description.
    Keys inside lists are not knobs of their own and are skipped."""
    docs, stack, comment, in_comment = {}, [], [], False
    list_indent = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("# --"):
            comment, in_comment = [stripped[4:].strip()], True
            continue
        if stripped.startswith("#"):
            if in_comment:
                comment.append(stripped[1:].strip())
            continue
        in_comment = False
        if not stripped:
            continue
        indent = len(line) - len(line.lstrip())
        if list_indent is not None and (indent > list_indent or stripped.startswith("-")):
            continue
        list_indent = None
        if stripped.startswith("-"):
            list_indent = indent
            continue
        m = KEY_LINE.match(line)
        if not m:
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = ".".join([s[1] for s in stack] + [m.group(2)])
        stack.append((indent, m.group(2)))
        if comment:
            docs[path] = " ".join(comment)
        comment = []
        if m.group(3).strip() == "":
            list_indent = None  # a nested block follows (a map or a list)
    return docs


def knob_paths(values, documented, prefix=""):
    """Leaves of the values tree, stopping at documented maps (free-form maps are one knob)."""
    out = []
    for k, v in values.items():
        path = f"{prefix}{k}"
        if isinstance(v, dict) and v and path not in documented:
            out += knob_paths(v, documented, path + ".")
        else:
            out.append(path)
    return out


def get_path(values, path):
    for part in path.split("."):
        values = values[part]
    return values


def set_path(values, path, value):
    parts = path.split(".")
    for part in parts[:-1]:
        values = values[part]
    values[parts[-1]] = value


def values_table(text):
    values = yaml.safe_load(text)
    docs = documented_keys(text)
    rows = ["| key | default | description |", "|---|---|---|"]
    for path in knob_paths(values, docs):
        default = json.dumps(get_path(values, path), separators=(", ", ": "))
        rows.append(f"| `{path}` | `{default}` | {docs.get(path, '')} |")
    return "\n".join(rows) + "\n"


def mutate(value, sub_schema):
    """A different value of the same shape, to see whether a key reaches the output."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        for alt in sub_schema.get("enum", []):
            if alt != value:
                return alt
        return value + "x" if value else "x"
    if isinstance(value, dict):
        return dict(value, **{"probe-key": "probe-value"})
    if isinstance(value, list):
        return value + (["--probe"] if not value or isinstance(value[0], str) else [{"name": "probe"}])
    raise AssertionError(f"no mutation for {value!r}")


def schema_at(s, path):
    for part in path.split("."):
        s = s.get("properties", {}).get(part)
        if s is None:
            return None
    return s


class ChartTest(unittest.TestCase):
    maxDiff = None

    def test_every_variant_renders_well_formed_objects(self):
        for name, files in variants():
            with self.subTest(variant=name):
                jsonschema.validate(load_values(files), schema(), cls=jsonschema.Draft7Validator)
                _, docs = render(files)
                self.assertTrue(docs)
                names = set()
                for d in docs:
                    kind, meta = d.get("kind"), d.get("metadata", {})
                    self.assertIn(kind, API_VERSIONS, f"unexpected kind {kind}")
                    self.assertEqual(d.get("apiVersion"), API_VERSIONS[kind], kind)
                    self.assertRegex(meta.get("name", ""), DNS_SUBDOMAIN, kind)
                    self.assertLessEqual(len(meta["name"]), 63 if kind == "Service" else 253)
                    if kind in NAMESPACED:
                        self.assertTrue(meta.get("namespace"), f"{kind} {meta['name']}: no namespace")
                    else:
                        self.assertIn(kind, CLUSTER_SCOPED)
                        self.assertNotIn("namespace", meta, f"{kind} is cluster-scoped")
                    for k, v in meta.get("labels", {}).items():
                        self.assertIsInstance(v, str, f"label {k} of {kind} {meta['name']}")
                        self.assertLessEqual(len(v), 63)
                    key = (kind, meta.get("namespace"), meta["name"])
                    self.assertNotIn(key, names, f"duplicate {key}")
                    names.add(key)
                self.check_references(docs)

    def check_references(self, docs):
        """Selectors select, bindings bind to what the chart renders."""
        sas = {(d["metadata"]["namespace"], d["metadata"]["name"]) for d in by_kind(docs, "ServiceAccount")}
        pods = []
        for w in by_kind(docs, "DaemonSet") + by_kind(docs, "Deployment"):
            spec = w["spec"]
            labels = spec["template"]["metadata"]["labels"]
            for k, v in spec["selector"]["matchLabels"].items():
                self.assertEqual(labels.get(k), v, f"{w['kind']} selector {k}")
            self.assertIn((w["metadata"]["namespace"], spec["template"]["spec"]["serviceAccountName"]), sas)
            c = spec["template"]["spec"]["containers"][0]
            port_names = {p["name"] for p in c["ports"]}
            for probe in ("livenessProbe", "readinessProbe"):
                self.assertIn(c[probe]["httpGet"]["port"], port_names)
            self.assertIn("limits", c["resources"])
            self.assertIn("memory", c["resources"]["limits"])
            pods.append(labels)
        services = by_kind(docs, "Service")
        for svc in services:
            sel = svc["spec"]["selector"]
            self.assertTrue(any(all(p.get(k) == v for k, v in sel.items()) for p in pods),
                            f"Service {svc['metadata']['name']} selects no pod")
        for sm in by_kind(docs, "ServiceMonitor"):
            sel = sm["spec"]["selector"]["matchLabels"]
            self.assertTrue(any(all(s["metadata"]["labels"].get(k) == v for k, v in sel.items())
                                for s in services), f"ServiceMonitor {sm['metadata']['name']} selects no Service")
        roles = {("ClusterRole", None, d["metadata"]["name"]) for d in by_kind(docs, "ClusterRole")}
        roles |= {("Role", d["metadata"]["namespace"], d["metadata"]["name"]) for d in by_kind(docs, "Role")}
        for b in by_kind(docs, "ClusterRoleBinding") + by_kind(docs, "RoleBinding"):
            ns = b["metadata"].get("namespace")
            self.assertIn((b["roleRef"]["kind"], ns if b["roleRef"]["kind"] == "Role" else None,
                           b["roleRef"]["name"]), roles)
            for s in b["subjects"]:
                self.assertIn((s["namespace"], s["name"]), sas)
        for pb in by_kind(docs, "ValidatingAdmissionPolicyBinding"):
            self.assertIn(pb["spec"]["policyName"],
                          {p["metadata"]["name"] for p in by_kind(docs, "ValidatingAdmissionPolicy")})

    def test_rbac_is_least_privilege(self):
        for name, files in variants():
            with self.subTest(variant=name):
                _, docs = render(files)
                values = load_values(files)
                for role in by_kind(docs, "ClusterRole") + by_kind(docs, "Role"):
                    for rule in role["rules"]:
                        for field in ("apiGroups", "resources", "verbs", "resourceNames"):
                            self.assertNotIn("*", rule.get(field, []), f"{role['metadata']['name']}: wildcard {field}")
                        self.assertNotIn("nonResourceURLs", rule)
                node_role = one(docs, "ClusterRole", "-node")
                self.assertEqual(self.grants(node_role), NODE_RULES)
                # The granular status permission covers this driver's entries only.
                for rule in node_role["rules"]:
                    if "resourceclaims/driver" in rule["resources"]:
                        self.assertEqual(rule["resources"], ["resourceclaims/driver"])
                        self.assertEqual(rule["resourceNames"], [values["driverName"]])
                want = dict(CLUSTER_RULES)
                if not values["cluster"]["claimEvents"]:
                    del want[("events.k8s.io", "events")]
                self.assertEqual(self.grants(one(docs, "ClusterRole", "-cluster")), want)
                deployment = one(docs, "Deployment", "-cluster")
                args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
                self.assertIn(f"--claim-events={str(values['cluster']['claimEvents']).lower()}",
                              args)
                leases = by_kind(docs, "Role")
                if values["cluster"]["leaderElection"]["enabled"]:
                    role = one(docs, "Role", "-leader")
                    self.assertEqual(self.grants(role), {("coordination.k8s.io", "leases"): {"get", "create", "update"}})
                    lease = values["cluster"]["leaderElection"]["leaseName"] or "dralens-cluster"
                    for rule in role["rules"]:
                        if set(rule["verbs"]) & {"get", "update"}:
                            self.assertEqual(rule["resourceNames"], [lease])
                    self.assertEqual(role["metadata"]["namespace"],
                                     values["cluster"]["leaderElection"]["leaseNamespace"] or NAMESPACE)
                else:
                    self.assertEqual(leases, [])

    @staticmethod
    def grants(role):
        out = {}
        for rule in role["rules"]:
            for g in rule["apiGroups"]:
                for r in rule["resources"]:
                    out.setdefault((g, r), set()).update(rule["verbs"])
        return out

    def test_admission_policy_pins_slices_to_the_writers_node(self):
        _, docs = render()
        vap = one(docs, "ValidatingAdmissionPolicy")
        sa = one(docs, "ServiceAccount", "-node")["metadata"]
        self.assertEqual(vap["spec"]["failurePolicy"], "Fail")
        rules = vap["spec"]["matchConstraints"]["resourceRules"]
        self.assertEqual(rules[0]["resources"], ["resourceslices"])
        self.assertIn("v1", rules[0]["apiVersions"])
        self.assertEqual(set(rules[0]["operations"]), {"CREATE", "UPDATE", "DELETE"})
        self.assertIn(f'"system:serviceaccount:{sa["namespace"]}:{sa["name"]}"',
                      vap["spec"]["matchConditions"][0]["expression"])
        variables = {v["name"]: v["expression"] for v in vap["spec"]["variables"]}
        self.assertIn("request.userInfo.extra[?'authentication.kubernetes.io/node-name']",
                      variables["userNodeName"])
        exprs = " ".join(v["expression"] for v in vap["spec"]["validations"])
        self.assertIn("oldObject.spec.?nodeName", exprs)  # DELETE and UPDATE: the stored slice
        self.assertIn("object.spec.?nodeName", exprs)     # CREATE and UPDATE: the new slice
        self.assertEqual(one(docs, "ValidatingAdmissionPolicyBinding")["spec"]["validationActions"], ["Deny"])
        _, off = render([self.write({"admissionPolicy": {"enabled": False}})])
        self.assertEqual(by_kind(off, "ValidatingAdmissionPolicy"), [])

    def test_node_flags_and_mounts_follow_the_cli_contract(self):
        contract = cli_contract()
        twins = {env: flag for flag, (env, _, _) in contract.items()}
        for name, files in variants():
            with self.subTest(variant=name):
                values = load_values(files)
                _, docs = render(files)
                ds = one(docs, "DaemonSet")
                pod = ds["spec"]["template"]["spec"]
                c = pod["containers"][0]
                self.assertEqual(c["args"][0], "node")
                flags = parse_args(c["args"][1:])
                for flag in flags:
                    if flag not in contract:
                        self.fail(f"--{flag} is not in the README flags table")
                    self.assertIn("node", contract[flag][2], f"--{flag} does not apply to node")
                env = {e["name"]: e for e in c["env"]}
                for var in env:
                    # POD_NAME and POD_NAMESPACE feed OTEL_RESOURCE_ATTRIBUTES in every pod; they
                    # are also the cluster role's leader-election twins, which the node ignores.
                    # OTEL_* is read by every role's tracing setup; the demo's --otlp-endpoint
                    # merely shares its variable.
                    if (var in twins and var not in ("POD_NAME", "POD_NAMESPACE")
                            and not var.startswith("OTEL_")):
                        self.assertIn("node", contract[twins[var]][2], f"{var} does not apply to node")
                self.assertEqual(env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"], "spec.nodeName")
                self.assertEqual(env["POD_UID"]["valueFrom"]["fieldRef"]["fieldPath"], "metadata.uid")

                volumes = {v["name"]: v for v in pod["volumes"]}
                mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
                host = {m["mountPath"]: volumes[m["name"]].get("hostPath", {}).get("path")
                        for m in c["volumeMounts"]}
                driver = flags["driver-name"]
                self.assertEqual(driver, values["driverName"])
                expected = {
                    flags["kubelet-registry-dir"]: flags["kubelet-registry-dir"],
                    flags["kubelet-plugins-dir"].rstrip("/") + "/" + driver:
                        flags["kubelet-plugins-dir"].rstrip("/") + "/" + driver,
                    flags["cdi-root"]: flags["cdi-root"],
                }
                paths = values["node"]["hostPaths"]
                self.assertEqual(flags["kubelet-registry-dir"], paths["kubeletRegistryDir"])
                self.assertEqual(flags["kubelet-plugins-dir"], paths["kubeletPluginsDir"])
                self.assertEqual(flags["cdi-root"], paths["cdiRoot"])
                nvml = flags.get("device-source", contract["device-source"][1]) == "nvml"
                if nvml:
                    lib_dir = env["LD_LIBRARY_PATH"]["value"]
                    expected["/dev"] = paths["dev"]
                    expected[lib_dir + "/libnvidia-ml.so.1"] = paths["nvmlLibrary"]
                    self.assertTrue(c["securityContext"]["privileged"])
                else:
                    self.assertNotIn("LD_LIBRARY_PATH", env)
                    self.assertFalse(c["securityContext"]["privileged"])
                    self.assertEqual(c["securityContext"]["capabilities"]["drop"], ["ALL"])
                host_mounts = {p: h for p, h in host.items() if h is not None}
                self.assertEqual(host_mounts, expected, "hostPath mounts against the node flags")
                self.assertTrue(all(not m.get("readOnly") for p, m in mounts.items()
                                    if p in list(expected)[:3]), "plugin dirs must be writable")
                port = int(flags["metrics-address"].rsplit(":", 1)[1])
                self.assertEqual([p["containerPort"] for p in c["ports"]], [port])
                self.assertEqual(c["livenessProbe"]["httpGet"]["path"], "/healthz")
                self.assertEqual(c["readinessProbe"]["httpGet"]["path"], "/readyz")
                self.assertEqual(pod["priorityClassName"], "system-node-critical")
                strategy = ds["spec"]["updateStrategy"]
                self.assertEqual(strategy["type"], "RollingUpdate")
                self.assertEqual(strategy["rollingUpdate"]["maxSurge"], 0)

    def test_cluster_flags_follow_the_cli_contract(self):
        contract = cli_contract()
        for name, files in variants():
            with self.subTest(variant=name):
                values = load_values(files)
                _, docs = render(files)
                dep = one(docs, "Deployment")
                c = dep["spec"]["template"]["spec"]["containers"][0]
                self.assertEqual(c["args"][0], "cluster")
                flags = parse_args(c["args"][1:])
                for flag in flags:
                    if flag in contract:
                        self.assertIn("cluster", contract[flag][2], f"--{flag} does not apply to cluster")
                    elif flag not in PENDING_CLUSTER_FLAGS:
                        self.fail(f"--{flag} is not in the README flags table")
                le = values["cluster"]["leaderElection"]
                self.assertEqual("leader-elect" in flags, le["enabled"])
                env = {e["name"]: e for e in c.get("env", [])}
                for name, path in (("POD_NAME", "metadata.name"),
                                   ("POD_NAMESPACE", "metadata.namespace")):
                    self.assertEqual(env[name]["valueFrom"]["fieldRef"]["fieldPath"], path)
                self.assertEqual(dep["spec"]["replicas"], values["cluster"]["replicas"])
                cost = values["cluster"]["cost"]
                self.assertEqual(flags.get("price-per-device-hour"), cost["pricePerDeviceHour"] or None)
                if cost["priceFileConfigMap"]:
                    mount = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}["prices"]
                    self.assertEqual(flags["price-file"], f"{mount}/{cost['priceFileKey']}")
                else:
                    self.assertNotIn("price-file", flags)
                sensitive = values["cluster"].get("topologySensitiveClasses") or []
                self.assertEqual(flags.get("topology-sensitive-classes"),
                                 ",".join(sensitive) or None)
                self.assertEqual(flags.get("stranded-series-retention"),
                                 values["cluster"].get("strandedSeriesRetention") or None)

    def test_tracing_environment(self):
        for name, files in variants():
            with self.subTest(variant=name):
                values = load_values(files)["tracing"]
                _, docs = render(files)
                for w in by_kind(docs, "DaemonSet") + by_kind(docs, "Deployment"):
                    env = {e["name"]: e for e in w["spec"]["template"]["spec"]["containers"][0]["env"]}
                    otel = {k for k in env if k.startswith("OTEL_")}
                    if not values["enabled"]:
                        self.assertEqual(otel, set())
                        continue
                    self.assertEqual(env["OTEL_EXPORTER_OTLP_ENDPOINT"]["value"], values["endpoint"])
                    self.assertEqual(env["OTEL_TRACES_SAMPLER"]["value"], values["sampler"])
                    self.assertEqual(env.get("OTEL_TRACES_SAMPLER_ARG", {}).get("value", ""), values["samplerArg"])
                    attrs = dict(kv.split("=", 1) for kv in env["OTEL_RESOURCE_ATTRIBUTES"]["value"].split(","))
                    self.assertEqual(attrs["k8s.pod.uid"], "$(POD_UID)")
                    for k, v in values["resourceAttributes"].items():
                        self.assertEqual(attrs[k], str(v))
                    names = [e["name"] for e in w["spec"]["template"]["spec"]["containers"][0]["env"]]
                    self.assertLess(names.index("POD_UID"), names.index("OTEL_RESOURCE_ATTRIBUTES"),
                                    "$(POD_UID) expands only from variables defined before it")
                    if values["headersSecret"]["name"]:
                        ref = env["OTEL_EXPORTER_OTLP_HEADERS"]["valueFrom"]["secretKeyRef"]
                        self.assertEqual(ref, {"name": values["headersSecret"]["name"], "key": values["headersSecret"]["key"]})

    def test_deviceclasses_validate_against_the_openapi_document(self):
        for name, files in variants():
            with self.subTest(variant=name):
                values = load_values(files)
                _, docs = render(files)
                classes = {d["metadata"]["name"]: d for d in by_kind(docs, "DeviceClass")}
                driver = values["driverName"]
                for kind in ("gpu", "mig"):
                    dc = classes[values["deviceClasses"][kind]["name"]]
                    self.assertEqual(dc["spec"]["selectors"][0]["cel"]["expression"],
                                     f"device.driver == '{driver}' && device.attributes['{driver}'].type == '{kind}'")
                    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
                        json.dump(dc, f)
                        f.flush()
                        res = subprocess.run(
                            ["/usr/bin/python3", str(ROOT / "tests/schema/validate_openapi.py"),
                             "io.k8s.api.resource.v1.DeviceClass", f.name], capture_output=True, text=True)
                        self.assertEqual(res.returncode, 0, res.stderr)

    def test_monitoring_objects_hold_their_files_byte_for_byte(self):
        with tempfile.TemporaryDirectory() as tmp:
            chart = pathlib.Path(tmp) / "dralens"
            shutil.copytree(CHART, chart)
            shutil.rmtree(chart / "files", ignore_errors=True)
            shutil.copytree(HERE / "fixtures" / "files", chart / "files")
            self.check_monitoring_files(chart)
        self.check_monitoring_files(CHART)  # the real copies, whatever alerts/ and grafana/ hold

    def check_monitoring_files(self, chart):
        rules = sorted((chart / "files/alerts").glob("*.yaml")) if (chart / "files/alerts").is_dir() else []
        boards = sorted((chart / "files/dashboards").glob("*.json")) if (chart / "files/dashboards").is_dir() else []
        for name, files in variants():
            with self.subTest(chart=str(chart), variant=name):
                all_values = load_values(files)
                values = all_values["monitoring"]
                text, docs = render(files, chart)
                prs = by_kind(docs, "PrometheusRule")
                cms = by_kind(docs, "ConfigMap")
                self.assertEqual(len(prs), len(rules) if values["prometheusRule"]["enabled"] else 0)
                self.assertEqual(len(cms), len(boards) if values["dashboards"]["enabled"] else 0)
                for src in rules if prs else []:
                    suffix = "-" + src.stem.lower().replace("_", "-")
                    pr = one(prs, "PrometheusRule", suffix)
                    if chart == CHART:
                        # The chart applies alerts.* to its copy of every alert; the generator
                        # builds the same rules from alerts/config.yaml on its own.
                        expected = alerts_generate.rules(
                            alerts_generate.load(), alert_overrides(all_values["alerts"]))
                        self.assertEqual(pr["spec"], expected, f"{src.name} with the alerts.* values")
                        if name == "default":
                            self.assertEqual(pr["spec"], yaml.safe_load((ROOT / "alerts/dralens.rules.yaml").read_text()),
                                             "the default PrometheusRule is not alerts/dralens.rules.yaml")
                    else:
                        # Alerts that no alerts.* value names pass through unchanged.
                        self.assertEqual(pr["spec"], yaml.safe_load(src.read_text()), src.name)
                    for k, v in values["prometheusRule"]["additionalLabels"].items():
                        self.assertEqual(pr["metadata"]["labels"][k], v)
                by_file = {next(iter(cm["data"])): cm for cm in cms}
                for src in boards if cms else []:
                    cm = by_file[src.name]
                    self.assertEqual(cm["data"], {src.name: src.read_text()})
                    for k, v in values["dashboards"]["labels"].items():
                        self.assertEqual(cm["metadata"]["labels"][k], v)
                    self.assertEqual(cm["metadata"]["namespace"], values["dashboards"]["namespace"] or NAMESPACE)
                    folder = cm["metadata"].get("annotations", {}).get(values["dashboards"]["folderAnnotation"])
                    self.assertEqual(folder, values["dashboards"]["folder"] or None)
                sm = values["serviceMonitor"]
                for m in by_kind(docs, "ServiceMonitor"):
                    ep = m["spec"]["endpoints"][0]
                    self.assertEqual((ep["interval"], ep["scrapeTimeout"]), (sm["interval"], sm["scrapeTimeout"]))
                    for k, v in sm["additionalLabels"].items():
                        self.assertEqual(m["metadata"]["labels"][k], v)
                if sm["enabled"] and values["service"]["enabled"]:
                    self.assertEqual(len(by_kind(docs, "ServiceMonitor")), 2)

    def test_copy_check_catches_drift(self):
        with tempfile.TemporaryDirectory() as tmp:
            root = pathlib.Path(tmp)
            (root / "grafana").mkdir()
            (root / "grafana/a.json").write_text('{"title": "a"}\n')
            (root / "grafana/b.json").write_text('{"title": "b"}\n')
            files = root / "charts/dralens/files"
            self.assertEqual(len(chart_files.check(root, files)), 2)  # both copies missing
            chart_files.copy(root, files)
            self.assertEqual(chart_files.check(root, files), [])
            (files / "dashboards/a.json").write_text('{"title": "b"}\n')
            self.assertIn("differs", " ".join(chart_files.check(root, files)))
            chart_files.copy(root, files)
            (files / "dashboards/old.json").write_text("{}\n")
            self.assertIn("stale", " ".join(chart_files.check(root, files)))
            chart_files.copy(root, files)
            self.assertFalse((files / "dashboards/old.json").exists())
        self.assertEqual(chart_files.check(), [], "the chart's copies differ from grafana/: run make generate")

    def test_every_key_is_documented_used_and_validated(self):
        text = (CHART / "values.yaml").read_text()
        values = yaml.safe_load(text)
        docs = documented_keys(text)
        s = schema()
        knobs = knob_paths(values, docs)
        undocumented = [k for k in knobs if k not in docs]
        self.assertEqual(undocumented, [], "values.yaml keys without a `# --` comment")
        variant_values = [(name, load_values(files)) for name, files in variants()]
        outputs = {}
        with tempfile.TemporaryDirectory() as tmp:
            # The chart plus the sample rule file and dashboard, so that the monitoring knobs
            # have something to act on even where alerts/ and grafana/ are still empty.
            chart = pathlib.Path(tmp) / "dralens"
            shutil.copytree(CHART, chart)
            shutil.copytree(HERE / "fixtures" / "files", chart / "files", dirs_exist_ok=True)
            for path in knobs:
                sub = schema_at(s, path)
                self.assertIsNotNone(sub, f"{path} is not in values.schema.json")
                # Validated: a value of the wrong type is rejected.
                bad = copy.deepcopy(values)
                set_path(bad, path, ["wrong"] if not isinstance(get_path(values, path), list) else "wrong")
                self.assertFalse(jsonschema.Draft7Validator(s).is_valid(bad), f"{path}: schema accepts a wrong type")
                # Used: changing it changes the output of at least one variant.
                used = False
                for name, base in variant_values:
                    if name not in outputs:
                        outputs[name] = self.render_values(base, chart, tmp)
                    changed = copy.deepcopy(base)
                    set_path(changed, path, mutate(get_path(base, path), sub))
                    if self.render_values(changed, chart, tmp) != outputs[name]:
                        used = True
                        break
                self.assertTrue(used, f"{path}: no template output depends on it")

    def render_values(self, values, chart, tmp):
        f = pathlib.Path(tmp) / "values.yaml"
        f.write_text(yaml.safe_dump(values))
        res = render_raw([f], chart)
        return (res.returncode, res.stdout, res.stderr)

    def test_schema_rejects_bad_values(self):
        validator = jsonschema.Draft7Validator(schema())
        for f in sorted((HERE / "bad-values").glob("*.yaml")):
            with self.subTest(file=f.name):
                self.assertFalse(validator.is_valid(load_values([f])), f"{f.name} passes the schema")

    def test_render_fails_with_a_clear_error(self):
        res = render_raw([self.write({"cluster": {"replicas": 2}})])
        self.assertNotEqual(res.returncode, 0)
        self.assertIn("cluster.replicas > 1 needs cluster.leaderElection.enabled", res.stderr)
        res = render_raw([self.write({"tracing": {"enabled": True}})])
        self.assertNotEqual(res.returncode, 0)
        self.assertIn("tracing.endpoint is required", res.stderr)

    def test_notes_render(self):
        for name, files in variants():
            with self.subTest(variant=name):
                res = render_raw(files, notes=True)
                self.assertEqual(res.returncode, 0, res.stderr)
                self.assertIn(f"namespace {NAMESPACE}", res.stdout)
                self.assertNotIn("%!", res.stdout)

    def test_readme_holds_the_values_table(self):
        table = values_table((CHART / "values.yaml").read_text())
        readme = (CHART / "README.md").read_text()
        m = re.search(r"<!-- values:begin -->\n(.*?)<!-- values:end -->", readme, re.S)
        self.assertIsNotNone(m, "charts/dralens/README.md has no values markers")
        self.assertEqual(m.group(1), table, "the values table drifted; paste:\n" + table)

    def test_default_image_is_the_image_make_image_builds(self):
        """Both roles run the image `make image` and the Dockerfile build: the Makefile's
        repository, tagged with appVersion, which is the version the binary reports (the CMake
        project version) and the image's version label; the command resolves on the image's
        PATH to its entrypoint."""
        app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
        cmake = re.search(r"^project\(dralens VERSION (\S+)",
                          (ROOT / "CMakeLists.txt").read_text(), re.M).group(1)
        self.assertEqual(app_version, cmake, "Chart.yaml appVersion != CMake project version")
        docker_label = re.search(r'org\.opencontainers\.image\.version="([^"]+)"',
                                 (ROOT / "Dockerfile").read_text()).group(1)
        self.assertEqual(docker_label, app_version, "the Dockerfile's version label")
        repository = re.search(r"^IMAGE_REPOSITORY \?= (\S+)$",
                               (ROOT / "Makefile").read_text(), re.M).group(1)
        self.assertIn("ENTRYPOINT [\"/usr/bin/dralens\"]", (ROOT / "Dockerfile").read_text())
        for name, files in variants():
            if any("image" in (yaml.safe_load(pathlib.Path(f).read_text()) or {}) for f in files):
                continue  # a variant that picks its own image
            with self.subTest(variant=name):
                _, docs = render(files)
                workloads = by_kind(docs, "DaemonSet") + by_kind(docs, "Deployment")
                self.assertEqual(len(workloads), 2)
                for w in workloads:
                    c = w["spec"]["template"]["spec"]["containers"][0]
                    self.assertEqual(c["image"], f"{repository}:{app_version}", w["kind"])
                    self.assertIn(c["command"], (["dralens"], ["/usr/bin/dralens"]), w["kind"])
        _, docs = render([self.write({"image": {"tag": "0.2.0-rc.1"}})])
        for w in by_kind(docs, "DaemonSet") + by_kind(docs, "Deployment"):
            self.assertEqual(w["spec"]["template"]["spec"]["containers"][0]["image"],
                             f"{repository}:0.2.0-rc.1")
        digest = "sha256:" + "ab" * 32
        _, docs = render([self.write({"image": {"repository": "registry.example/dralens",
                                                "tag": "ignored", "digest": digest}})])
        for w in by_kind(docs, "DaemonSet") + by_kind(docs, "Deployment"):
            self.assertEqual(w["spec"]["template"]["spec"]["containers"][0]["image"],
                             f"registry.example/dralens@{digest}")

    def test_renderer_follows_helm_semantics(self):
        """The renderer's built-ins on a chart made to exercise them, against output worked out
        from Helm's rules: toYaml drops the trailing newline and sorts keys, numbers from
        values are float64, include returns a string, tpl renders with the caller's context, a
        null in an override deletes the key, AsConfig keys by base name, required fails."""
        fixture = HERE / "fixtures" / "builtins"
        cmd = [RENDER, "-chart", str(fixture), "-f", str(fixture / "override.yaml"), "-name", "rel",
               "-namespace", "ns", "-strict"]
        res = subprocess.run(cmd, capture_output=True, text=True)
        self.assertEqual(res.returncode, 0, res.stderr)
        self.assertEqual(res.stdout, (HERE / "fixtures" / "builtins-expected.yaml").read_text())
        res = subprocess.run(cmd[:3] + ["-f", self.write({"needRequired": True})], capture_output=True, text=True)
        self.assertNotEqual(res.returncode, 0)
        self.assertIn("empty must be set", res.stderr)

    def write(self, values):
        f = tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False)
        yaml.safe_dump(values, f)
        f.close()
        self.addCleanup(os.unlink, f.name)
        return f.name


def main():
    global RENDER
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--build-dir")
    parser.add_argument("--print-values-table", action="store_true")
    parser.add_argument("--write-values-table", action="store_true",
                        help="refresh the table in charts/dralens/README.md (make generate)")
    args, rest = parser.parse_known_args()
    ARGS.build_dir = args.build_dir
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
        RENDER = build_renderer(args.build_dir or tmp)
        prog = unittest.main(argv=[sys.argv[0]] + rest, exit=False)
        return 0 if prog.result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
