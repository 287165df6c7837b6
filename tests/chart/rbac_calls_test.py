#!/usr/bin/python3
"""The chart's RBAC grants exactly the API calls the code makes.

Lists every Kubernetes API call site of each role in the source (KubeClient calls on a
ResourceType, and the informers the cluster role starts, which list and watch), maps them to
(API group, resource) -> verbs with the ResourceType table of src/k8s/client.h, and compares the
result with the rules the chart test holds the rendered ClusterRoles and the leader-election
Role to (tests/chart/chart_lib.py and objects_checks.py). A call the chart does not grant fails,
and so does a grant no code uses.

A call with a subresource argument ("status") is a call on "<plural>/status". Since Kubernetes
1.36 (DRAResourceClaimGranularStatusAuthorization), a node-local driver that writes a
ResourceClaim's status.devices also needs the synthetic "resourceclaims/driver" subresource with
the node-aware verb "associated-node:<verb>" (for its own driver name): DERIVED adds it.
"""
import importlib.util
import pathlib
import re
import sys
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[2]

spec = importlib.util.spec_from_file_location("chart_lib", ROOT / "tests/chart/chart_lib.py")
chart_lib = importlib.util.module_from_spec(spec)
spec.loader.exec_module(chart_lib)

VERBS = {"Get": "get", "List": "list", "Watch": "watch", "Create": "create", "Update": "update",
         "MergePatch": "patch", "Delete": "delete", "DeleteCollection": "deletecollection"}
CALL = re.compile(r"\.(Get|List|Watch|Create|Update|MergePatch|Delete|DeleteCollection)\(\s*"
                  r"(?:k8s::)?(k[A-Z]\w+)\s*,")
# The subresource argument of an Update or MergePatch: the last argument, a string literal.
SUBRESOURCE = re.compile(r',\s*"(status)"\s*\)$')
# Writes that need a second permission, keyed by the write's (group, resource) and verb.
DERIVED = {
    (("resource.k8s.io", "resourceclaims/status"), "update"):
        (("resource.k8s.io", "resourceclaims/driver"), "associated-node:update"),
    (("resource.k8s.io", "resourceclaims/status"), "patch"):
        (("resource.k8s.io", "resourceclaims/driver"), "associated-node:patch"),
}
# k8s::ListAll(client, kType, ...) pages through List.
LIST_ALL = re.compile(r"ListAll\(\s*[\w*.>-]+\s*,\s*(?:k8s::)?(k[A-Z]\w+)\s*,")
TYPE = re.compile(r'inline const ResourceType (k\w+)\{"([^"]*)",\s*"[^"]*",\s*"([^"]+)"')

# Where each role's calls live.
NODE_SOURCES = ["driver", "src/app/node.cc", "src/app/node_driver.cc"]
CLUSTER_SOURCES = ["exporter/cluster", "src/app/cluster.cc", "src/app/cluster_role.cc",
                   "src/app/cluster_watch.cc", "src/app/claim_event_writer.cc"]
LEADER_SOURCES = ["src/k8s/leader_elector.cc"]


def resource_types():
    text = (ROOT / "src/k8s/client.h").read_text()
    return {name: (group, plural) for name, group, plural in TYPE.findall(text)}


def sources(paths):
    for p in paths:
        path = ROOT / p
        files = sorted(path.rglob("*.cc")) if path.is_dir() else [path]
        for f in files:
            if "/proto/" not in str(f):
                yield f


def call_text(text, start):
    """The call starting at `start` (just after its opening parenthesis), to the matching ')'."""
    depth, i, quoted = 1, start, False
    while depth > 0 and i < len(text):
        c = text[i]
        if quoted:
            if c == "\\":
                i += 1
            elif c == '"':
                quoted = False
        elif c == '"':
            quoted = True
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        i += 1
    return text[start:i]


def calls(paths, types):
    out = {}
    for f in sources(paths):
        text = f.read_text()
        for match in CALL.finditer(text):
            method, name = match.group(1), match.group(2)
            if name not in types:
                raise AssertionError(f"{f}: {name} is not a ResourceType of src/k8s/client.h")
            group, plural = types[name]
            verb = VERBS[method]
            sub = SUBRESOURCE.search(call_text(text, text.index("(", match.start()) + 1))
            if sub and method in ("Update", "MergePatch"):
                plural = f"{plural}/{sub.group(1)}"
            out.setdefault((group, plural), set()).add(verb)
            if ((group, plural), verb) in DERIVED:
                resource, derived_verb = DERIVED[((group, plural), verb)]
                out.setdefault(resource, set()).add(derived_verb)
        for name in LIST_ALL.findall(text):
            out.setdefault(types[name], set()).add("list")
        if f.name == "cluster_watch.cc":
            # One informer per listed type (and the optional Workloads one): each lists, then
            # watches.
            names = re.findall(r"&k8s::(k\w+)", text)
            if not names:
                raise AssertionError("cluster_watch.cc: the informer types were not found")
            for name in names:
                out.setdefault(types[name], set()).update({"list", "watch"})
    return out


class RbacCallsTest(unittest.TestCase):
    def setUp(self):
        self.types = resource_types()
        self.assertIn("kResourceSlices", self.types)

    def test_node_role(self):
        found = calls(NODE_SOURCES, self.types)
        self.assertEqual(found, chart_lib.NODE_RULES)

    def test_cluster_role(self):
        found = calls(CLUSTER_SOURCES, self.types)
        self.assertEqual(found, chart_lib.CLUSTER_RULES)

    def test_leader_election(self):
        found = calls(LEADER_SOURCES, self.types)
        self.assertEqual(found, {("coordination.k8s.io", "leases"): {"get", "create", "update"}})

    def test_a_status_write_is_a_subresource_call_with_its_granular_permission(self):
        sample = ('client_.Update(k8s::kResourceClaims, ns, claim, "status");\n'
                  'client_.Update(k8s::kResourceSlices, "", slice, "");')
        found = {}
        for match in CALL.finditer(sample):
            sub = SUBRESOURCE.search(call_text(sample, sample.index("(", match.start()) + 1))
            found[match.group(2)] = sub.group(1) if sub else ""
        self.assertEqual(found, {"kResourceClaims": "status", "kResourceSlices": ""})

    def test_the_scan_sees_multi_line_calls(self):
        # Calls wrapped over lines (clang-format does that) must count.
        sample = "client_.Create(\n      kLeases, ns, obj);"
        self.assertEqual(CALL.findall(sample), [("Create", "kLeases")])
        self.assertEqual(LIST_ALL.findall("k8s::ListAll(client_, k8s::kResourceSlices, \"\", o)"),
                         ["kResourceSlices"])


if __name__ == "__main__":
    sys.exit(0 if unittest.main(exit=False).result.wasSuccessful() else 1)
