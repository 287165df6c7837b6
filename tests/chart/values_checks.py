"""The chart's values and what is built from files: the monitoring objects against their
sources, every values.yaml key documented, used and validated, the schema and the render errors,
the notes, the README's values table, the default image, and the renderer's Helm semantics.
Mixed into chart_test.ChartTest, which provides write()."""
import copy
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

import jsonschema
import yaml

import chart_lib
from chart_lib import (CHART, HERE, NAMESPACE, ROOT, alert_overrides, by_kind, documented_keys,
                       get_path, knob_paths, load_values, mutate, one, render, render_raw, schema,
                       schema_at, set_path, values_table, variants)

sys.path.insert(0, str(ROOT / "charts"))
sys.path.insert(0, str(ROOT / "alerts"))
import chart_files  # noqa: E402
import generate as alerts_generate  # noqa: E402


class ValuesChecks:
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
        cmd = [chart_lib.RENDER, "-chart", str(fixture), "-f", str(fixture / "override.yaml"),
               "-name", "rel", "-namespace", "ns", "-strict"]
        res = subprocess.run(cmd, capture_output=True, text=True)
        self.assertEqual(res.returncode, 0, res.stderr)
        self.assertEqual(res.stdout, (HERE / "fixtures" / "builtins-expected.yaml").read_text())
        res = subprocess.run(cmd[:3] + ["-f", self.write({"needRequired": True})], capture_output=True, text=True)
        self.assertNotEqual(res.returncode, 0)
        self.assertIn("empty must be set", res.stderr)
