#!/usr/bin/python3
"""The rules of grafana/dashboard-linter (which is not packaged in Debian), re-implemented over
grafana/*.json, plus dralens's own: schemaVersion 39 or later, stable uids, a cluster variable,
every metric a query names in the catalogue (the generated table of docs/metrics.md) or a
recording rule of alerts/, label names and values the catalogue names, and exemplars on the
claim-duration queries.

Exclusions live in grafana/.lint (YAML): {exclusions: {<rule>: {reason: ..., entries:
[{dashboard: <uid>, panel: <title>}]}}}; a rule without entries is excluded everywhere. Every
exclusion needs a reason.

Usage: lint_dashboards.py [--promtool PATH] [--expect-violations RULE,...] [FILE ...]
With --expect-violations it succeeds only when exactly the named rules fail (used on the broken
fixture that proves the linter can fail).
"""

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import promql  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

# grafana/dashboard-linter's list of valid units (Grafana's value formats).
VALID_UNITS = set("""
none string short percent percentunit humidity dB hex0x hex sci locale pixel accMS2 accFS2 accG
degree radian grad arcmin arcsec areaM2 areaF2 areaMI2 flops mflops gflops tflops pflops eflops
zflops yflops ppm conppb conngm3 conngNm3 conμgm3 conμgNm3 conmgm3 conmgNm3 congm3 congNm3
conmgdL conmmolL currencyUSD currencyGBP currencyEUR currencyJPY currencyRUB currencyUAH
currencyBRL currencyDKK currencyISK currencyNOK currencySEK currencyCZK currencyCHF currencyPLN
currencyBTC currencymBTC currencyμBTC currencyZAR currencyINR currencyKRW currencyIDR currencyPHP
currencyVND bytes decbytes bits decbits kbytes deckbytes mbytes decmbytes gbytes decgbytes tbytes
dectbytes pbytes decpbytes pps binBps Bps binbps bps KiBs Kibits KBs Kbits MiBs Mibits MBs Mbits
GiBs Gibits GBs Gbits TiBs Tibits TBs Tbits PiBs Pibits PBs Pbits dateTimeAsIso
dateTimeAsIsoNoDateIfToday dateTimeAsUS dateTimeAsUSNoDateIfToday dateTimeAsLocal
dateTimeAsLocalNoDateIfToday dateTimeAsSystem dateTimeFromNow watt kwatt megwatt gwatt mwatt Wm2
voltamp kvoltamp voltampreact kvoltampreact watth watthperkg kwatth kwattm amph kamph mamph joule
ev amp kamp mamp volt kvolt mvolt dBm ohm kohm Mohm farad µfarad nfarad pfarad ffarad henry
mhenry µhenry lumens flowgpm flowcms flowcfs flowcfm litreh flowlpm flowmlpm lux forceNm forcekNm
forceN forcekN Hs KHs MHs GHs THs PHs EHs massmg massg masslb masskg masst lengthmm lengthin
lengthft lengthm lengthkm lengthmi pressurembar pressurebar pressurekbar pressurepa pressurehpa
pressurekpa pressurehg pressurepsi radbq radci radgy radrad radsv radmsv radusv radrem radexpckg
radr radsvh radmsvh radusvh rotrpm rothz rotrads rotdegs celsius fahrenheit kelvin hertz ns µs ms
s m h d dtdurationms dtdurations dthms dtdhms timeticks clockms clocks cps ops reqps rps wps iops
cpm opm rpm wpm velocityms velocitykmh velocitymph velocityknot mlitre litre m3 Nm3 dm3 gallons
bool bool_yes_no bool_on_off
""".split())
DATASOURCE_REFS = {"$datasource", "${datasource}", "$prometheus_datasource",
                   "${prometheus_datasource}"}
# Series of other exporters that dralens panels read: Prometheus's own, and dcgm-exporter's
# utilisation, which the Node dashboard joins with dralens_node_claim_info.
EXTERNAL = {"up", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"}
RANGE_VARIABLES = {"$__rate_interval", "${__rate_interval}"}
# dralens: queries on these histograms must ask for exemplars (trace ids).
EXEMPLAR_METRICS = {"dralens_node_claim_duration_seconds_bucket"}


def ds_uid(ds):
    if isinstance(ds, dict):
        return ds.get("uid", "")
    return ds or ""


def all_panels(dashboard):
    for p in dashboard.get("panels", []):
        yield p
        for inner in p.get("panels", []) or []:
            yield inner


def for_promtool(expr):
    """Grafana variables replaced by values promtool accepts."""
    expr = re.sub(r"\$\{?__rate_interval\}?|\$\{?__interval\}?", "5m", expr)
    expr = re.sub(r"\$\{?__range\}?", "1h", expr)
    return re.sub(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?", ".+", expr)


class Linter:
    def __init__(self, catalogue, records, exclusions):
        self.catalogue, self.records, self.exclusions = catalogue, records, exclusions
        self.problems = []  # (rule, dashboard uid, panel title, message)
        self.exprs = []     # (uid, panel title, expr) for promtool

    def excluded(self, rule, uid, panel):
        ex = self.exclusions.get(rule)
        if ex is None:
            return False
        entries = ex.get("entries")
        if not entries:
            return True
        return any(e.get("dashboard") == uid and e.get("panel") in (None, panel) for e in entries)

    def fail(self, rule, uid, panel, message):
        if not self.excluded(rule, uid, panel):
            self.problems.append((rule, uid, panel, message))

    def lint(self, path):
        d = json.load(open(path, encoding="utf-8"))
        uid = d.get("uid", "")
        self.dashboard_rules(d, uid, path)
        variables = {v.get("name"): v for v in d.get("templating", {}).get("list", [])}
        self.template_rules(variables, uid)
        for p in all_panels(d):
            self.panel_rules(p, uid)
        return uid

    def dashboard_rules(self, d, uid, path):
        if not re.fullmatch(r"[A-Za-z0-9_-]{8,40}", uid):
            self.fail("dralens-stable-uid", uid, None, f"{path}: uid {uid!r} is not 8-40 "
                      "characters of letters, digits, - and _")
        if not isinstance(d.get("schemaVersion"), int) or d["schemaVersion"] < 39:
            self.fail("dralens-schema-version", uid, None,
                      f"schemaVersion {d.get('schemaVersion')!r} is below 39")
        if d.get("editable") is not False:
            self.fail("uneditable-dashboard", uid, None, "editable is not false")
        if not d.get("title"):
            self.fail("dralens-stable-uid", uid, None, "the dashboard has no title")

    def template_rules(self, variables, uid):
        ds = [v for v in variables.values() if v.get("type") == "datasource"
              and v.get("query") == "prometheus"
              and (v.get("name") == "datasource" or v.get("name", "").endswith("_datasource"))]
        if not ds:
            self.fail("template-datasource-rule", uid, None,
                      "no prometheus datasource variable named datasource or <type>_datasource")
        for name, label in (("job", "Job"), ("instance", "Instance")):
            rule = f"template-{name}-rule"
            v = variables.get(name)
            if v is None:
                self.fail(rule, uid, None, f"no {name} variable")
                continue
            if ds_uid(v.get("datasource")) not in DATASOURCE_REFS:
                self.fail(rule, uid, None, f"{name} variable does not use $datasource")
            if v.get("type") != "query":
                self.fail(rule, uid, None, f"{name} variable is a {v.get('type')}, not a query")
            if v.get("label") != label:
                self.fail(rule, uid, None, f"{name} variable is labelled {v.get('label')!r}, "
                          f"not {label!r}")
            if not v.get("multi"):
                self.fail(rule, uid, None, f"{name} variable is not multi-select")
            if v.get("allValue") != ".+":
                self.fail(rule, uid, None, f"{name} variable allValue is not '.+'")
        if "cluster" not in variables:
            self.fail("dralens-cluster-variable", uid, None, "no cluster variable")
        for name, v in variables.items():
            if v.get("type") != "query":
                continue
            if v.get("refresh") != 2:
                self.fail("template-on-time-change-reload-rule", uid, None,
                          f"variable {name} refresh is {v.get('refresh')!r}, not 2")
            query = v.get("query")
            if isinstance(query, dict):
                query = query.get("query", "")
            m = re.fullmatch(r"\s*label_values\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\)\s*", query or "")
            if not m:
                self.fail("template-label-promql-rule", uid, None,
                          f"variable {name}: {query!r} is not label_values(<expr>, <label>)")
                continue
            try:
                tree = promql.parse(m.group(1))
            except promql.ParseError as e:
                self.fail("template-label-promql-rule", uid, None, f"variable {name}: {e}")
                continue
            self.exprs.append((uid, f"variable {name}", m.group(1)))
            for sel in promql.selectors(tree):
                for p in promql.check_selector(self.catalogue, sel, self.records, EXTERNAL):
                    self.fail("dralens-metric-in-catalogue", uid, f"variable {name}", p)

    def panel_rules(self, p, uid):
        if p.get("type") == "row":
            return
        title = p.get("title", "")
        if p.get("type") == "graph":
            self.fail("dralens-no-graph-panel", uid, title, "the graph panel is deprecated")
        if not title or not p.get("description"):
            self.fail("panel-title-description-rule", uid, title, "no title or description")
        unit = p.get("fieldConfig", {}).get("defaults", {}).get("unit", "")
        for o in p.get("fieldConfig", {}).get("overrides", []) or []:
            for prop in o.get("properties", []):
                if prop.get("id") == "unit":
                    unit = prop.get("value", unit)
        if unit not in VALID_UNITS:
            self.fail("panel-units-rule", uid, title, f"no or invalid unit {unit!r}")
        if p.get("type") == "heatmap":
            y_unit = p.get("options", {}).get("yAxis", {}).get("unit", "")
            if y_unit not in VALID_UNITS:
                self.fail("panel-units-rule", uid, title, f"heatmap y axis unit {y_unit!r}")
        if ds_uid(p.get("datasource")) not in DATASOURCE_REFS:
            self.fail("panel-datasource-rule", uid, title,
                      f"uses datasource {ds_uid(p.get('datasource'))!r}, not $datasource")
        targets = p.get("targets") or []
        if not targets:
            self.fail("panel-no-targets-rule", uid, title, "no targets")
        for t in targets:
            self.target_rules(t, uid, title)

    def target_rules(self, t, uid, title):
        expr = t.get("expr", "")
        try:
            tree = promql.parse(expr)
        except promql.ParseError as e:
            self.fail("target-promql-rule", uid, title, f"{expr!r}: {e}")
            return
        self.exprs.append((uid, title, expr))
        for node, parents in promql.walk(tree):
            if isinstance(node, promql.Matrix) and node.step is None:
                parent = parents[-1] if parents else None
                if node.range in RANGE_VARIABLES:
                    if parent is not None and not isinstance(parent, promql.Call):
                        self.fail("target-rate-interval-rule", uid, title,
                                  "$__rate_interval used outside a function")
                elif isinstance(parent, promql.Call) and parent.func in ("rate", "irate"):
                    self.fail("target-rate-interval-rule", uid, title,
                              f"{parent.func} over [{node.range}], not [$__rate_interval]")
            if isinstance(node, promql.Selector):
                for label in ("job", "instance"):
                    if not any(l == label and op == "=~" and v in (f"${label}", f"${{{label}}}")
                               for l, op, v in node.matchers):
                        self.fail(f"target-{label}-rule", uid, title,
                                  f"selector {node.name} has no {label}=~\"${label}\"")
                names = node.metric_names()
                if any(n.endswith("_total") for n in names):
                    ok = (len(parents) >= 2 and isinstance(parents[-1], promql.Matrix)
                          and isinstance(parents[-2], promql.Call)
                          and parents[-2].func in ("rate", "irate", "increase"))
                    if not ok:
                        self.fail("target-counter-agg-rule", uid, title,
                                  f"counter {node.name} is not inside rate, irate or increase")
                for p in promql.check_selector(self.catalogue, node, self.records, EXTERNAL):
                    self.fail("dralens-metric-in-catalogue", uid, title, p)
                if set(names) & EXEMPLAR_METRICS and not t.get("exemplar"):
                    self.fail("dralens-exemplars", uid, title,
                              f"the query of {node.name} does not enable exemplars")

    def promtool_check(self, promtool):
        """Every expression through Prometheus's own parser, as one rule file."""
        rules = [{"record": f"dashboard_expr_{i}", "expr": for_promtool(e)}
                 for i, (_, _, e) in enumerate(self.exprs)]
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
            yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}, f)
            name = f.name
        try:
            r = subprocess.run([promtool, "check", "rules", name], capture_output=True, text=True)
        finally:
            os.unlink(name)
        if r.returncode != 0:
            self.fail("target-promql-rule", "", None, "promtool rejects an expression:\n"
                      + r.stdout + r.stderr)


def load_records(rules_path):
    doc = yaml.safe_load(open(rules_path, encoding="utf-8"))
    return {r["record"] for g in doc["groups"] for r in g["rules"] if "record" in r}


def load_exclusions(path):
    if not os.path.exists(path):
        return {}
    doc = yaml.safe_load(open(path, encoding="utf-8")) or {}
    exclusions = doc.get("exclusions") or {}
    for rule, ex in exclusions.items():
        if not (ex or {}).get("reason"):
            raise SystemExit(f"{path}: the exclusion of {rule} has no reason")
    return exclusions


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*")
    ap.add_argument("--catalogue", default=os.path.join(ROOT, "docs", "metrics.md"),
                    help="the generated metric table (docs/metrics.md)")
    ap.add_argument("--rules", default=os.path.join(ROOT, "alerts", "dralens.rules.yaml"))
    ap.add_argument("--lint-file", default=os.path.join(ROOT, "grafana", ".lint"))
    ap.add_argument("--promtool", default=None, help="also parse every query with promtool")
    ap.add_argument("--expect-violations", default=None)
    args = ap.parse_args()

    files = args.files or sorted(glob.glob(os.path.join(ROOT, "grafana", "*.json")))
    if not files:
        print("no dashboards found")
        return 1
    linter = Linter(promql.load_catalogue(args.catalogue), load_records(args.rules),
                    load_exclusions(args.lint_file))
    uids = {}
    for path in files:
        uid = linter.lint(path)
        if uid in uids:
            linter.fail("dralens-stable-uid", uid, None, f"{path} and {uids[uid]} share a uid")
        uids[uid] = path
    if args.promtool:
        linter.promtool_check(args.promtool)

    for rule, uid, panel, message in linter.problems:
        where = f"{uid}" + (f" / {panel}" if panel else "")
        print(f"{rule}: {where}: {message}")
    failed = {p[0] for p in linter.problems}
    if args.expect_violations is not None:
        expected = set(filter(None, args.expect_violations.split(",")))
        if failed != expected:
            print(f"expected exactly these rules to fail: {sorted(expected)}; "
                  f"failed: {sorted(failed)}")
            return 1
        print(f"ok: the broken fixture fails exactly {sorted(expected)}")
        return 0
    if linter.problems:
        return 1
    print(f"ok: {len(files)} dashboards, {len(linter.exprs)} queries pass the lint rules")
    return 0


if __name__ == "__main__":
    sys.exit(main())
