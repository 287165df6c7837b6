"""What the chart tests share: rendering charts/dralens with the renderer built from
tests/chart/render, the values files and their merge, the schema walk, the README's CLI contract,
the documented keys of values.yaml and its values table, and the RBAC the chart must grant
(rbac_calls_test.py compares NODE_RULES and CLUSTER_RULES with the code's API calls)."""
import copy
import json
import os
import pathlib
import re
import shutil
import subprocess

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "dralens"
HERE = ROOT / "tests" / "chart"

# The renderer's path, set by chart_test.main() once it is built.
RENDER = None
NAMESPACE = "dralens-system"

# Cluster-role flags the chart may pass before the README's CLI table lists them (none: all
# exist now). A flag listed here that the table does hold is checked like any other flag.
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
