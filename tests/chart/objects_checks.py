"""The chart's rendered objects: well-formed, referring to each other, least-privilege RBAC,
the admission policy, the node and cluster flags against the README's CLI contract, tracing and
the DeviceClasses. Mixed into chart_test.ChartTest, which provides write()."""
import json
import subprocess
import tempfile

import jsonschema

from chart_lib import (API_VERSIONS, CLUSTER_RULES, CLUSTER_SCOPED, DNS_SUBDOMAIN, NAMESPACE,
                       NAMESPACED, NODE_RULES, PENDING_CLUSTER_FLAGS, ROOT, by_kind, cli_contract,
                       load_values, one, parse_args, render, schema, variants)


class ObjectsChecks:
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
