#!/usr/bin/python3
"""Builds the dashboards grafana/*.json from their definitions in grafana/src/*.py and the
pieces they share: the selector every query filters on, the template variables, the dashboard
frame, one builder per panel type, the self-monitoring row and the layout.

  generate.py            write grafana/<name>.json for every grafana/src/<name>.py, and the
                         panel list of grafana/README.md
  generate.py --check    change nothing; exit 1 naming every dashboard (or the README) that
                         differs, is missing, or has no definition

A definition module defines DASHBOARD = dashboard(...). In a query, `{S}` stands for the
selector and `{S, more="matchers"}` for the selector plus more matchers:

    timeseries("Claims in flight", "What ... (dralens_node_in_flight).",
               [("sum by (instance) (dralens_node_in_flight{S})", "{{instance}}")], unit="short")

Panels flow left to right in rows of 24 columns, each row below the tallest panel of the one
before, as Grafana places them; ids count up in order. See grafana/README.md.
"""

import argparse
import glob
import importlib.util
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "src")
README = os.path.join(HERE, "README.md")

# The selector of every query: the dashboard's cluster, job and instance variables.
SELECTOR = 'cluster=~"$cluster", job=~"$job", instance=~"$instance"'
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
WIDTH = 24


def q(expr):
    """A query with `{S` expanded into `{<selector>`; a query without it is an error, so that
    no panel forgets the dashboard's variables."""
    out, n = re.subn(r"\{S(?=[,}])", "{" + SELECTOR, expr)
    if n == 0:
        raise ValueError(f"query without the {{S}} selector: {expr}")
    return out


# ---- the dashboard frame and its variables -------------------------------------------------

def variables(metric):
    """datasource, cluster, job and instance, each narrowed by the ones before it; `metric` is
    a series every target of the dashboard exports, to list the label values from."""
    out = [{
        "name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
        "current": {}, "hide": 0, "refresh": 1, "regex": "", "options": [],
    }]
    matchers = []
    for name, label, all_value in (("cluster", "Cluster", ".*"), ("job", "Job", ".+"),
                                   ("instance", "Instance", ".+")):
        series = f"{metric}{{{', '.join(matchers)}}}" if matchers else metric
        query = f"label_values({series}, {name})"
        out.append({
            "name": name, "label": label, "type": "query", "datasource": dict(DATASOURCE),
            "query": {"query": query, "refId": f"{name}-variable"}, "definition": query,
            "refresh": 2, "multi": True, "includeAll": True, "allValue": all_value,
            "current": {}, "hide": 0, "sort": 1, "regex": "", "options": [],
        })
        matchers.append(f'{name}=~"${name}"')
    return out


def dashboard(uid, title, description, tags, variable_metric, rows):
    """A dashboard: rows is a list of row(...) in order; the self-monitoring row goes last."""
    panels, next_id, y = [], 1, 0
    for r in rows:
        row_panels, next_id, y = layout(r, next_id, y)
        panels += row_panels
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["dralens"] + list(tags),
        "timezone": "utc",
        "editable": False,
        "graphTooltip": 1,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "fiscalYearStartMonth": 0,
        "liveNow": False,
        "weekStart": "",
        "timepicker": {},
        "links": [{"title": "dralens dashboards", "type": "dashboards", "tags": ["dralens"],
                   "asDropdown": True, "includeVars": True, "keepTime": True}],
        "annotations": {"list": [{
            "builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"},
            "enable": True, "hide": True, "iconColor": "rgba(0, 211, 255, 1)",
            "name": "Annotations & Alerts", "type": "dashboard"}]},
        "templating": {"list": variables(variable_metric)},
        "panels": panels,
    }


# ---- layout --------------------------------------------------------------------------------

def row(title, panels):
    """A row header followed by its panels (each a (width, height, panel) from a builder)."""
    return {"title": title, "panels": panels}


def layout(r, next_id, y):
    out = [{"id": next_id, "type": "row", "title": r["title"], "collapsed": False,
            "gridPos": {"h": 1, "w": WIDTH, "x": 0, "y": y}, "panels": []}]
    next_id, y = next_id + 1, y + 1
    x, bottom = 0, y
    for w, h, panel in r["panels"]:
        if w > WIDTH:
            raise ValueError(f"{panel['title']}: width {w} is more than {WIDTH}")
        if x + w > WIDTH:
            x, y = 0, bottom
        placed = {"id": next_id, "type": panel.pop("type"), "title": panel.pop("title")}
        placed.update({"description": panel.pop("description"), "datasource": dict(DATASOURCE),
                       "gridPos": {"h": h, "w": w, "x": x, "y": y}})
        placed.update(panel)
        out.append(placed)
        next_id, x, bottom = next_id + 1, x + w, max(bottom, y + h)
    return out, next_id, bottom


# ---- panel builders: each returns (width, height, panel) ------------------------------------

def target(ref, expr, legend="", kind="range", exemplar=False, fmt=None):
    t = {"refId": ref, "datasource": dict(DATASOURCE), "expr": q(expr), "legendFormat": legend,
         "range": kind == "range", "instant": kind == "instant"}
    if fmt:
        t["format"] = fmt
    if exemplar:
        t["exemplar"] = True
    return t


def targets(queries, **kw):
    """[(expr, legend), ...] as targets A, B, C, ..."""
    return [target(chr(ord("A") + i), expr, legend, **kw) for i, (expr, legend) in enumerate(queries)]


def stat(title, description, expr, unit="short", decimals=None, w=4, h=4):
    defaults = {"unit": unit}
    if decimals is not None:
        defaults["decimals"] = decimals
    return w, h, {
        "type": "stat", "title": title, "description": description,
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                    "colorMode": "value", "graphMode": "area", "textMode": "auto"},
        "targets": [target("A", expr, kind="instant")],
    }


def timeseries(title, description, queries, unit="short", stack=False, exemplar=False, w=12,
               h=8, no_value=None):
    """queries: [(expr, legend), ...]. stack: stacked areas (parts of a whole). no_value: what
    the panel says when the queries return nothing (e.g. another exporter is missing)."""
    defaults = {"unit": unit, "custom": {
        "drawStyle": "line", "fillOpacity": 10, "showPoints": "never",
        "stacking": {"mode": "normal" if stack else "none", "group": "A"}}}
    if no_value is not None:
        defaults["noValue"] = no_value
    return w, h, {
        "type": "timeseries", "title": title, "description": description,
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {"legend": {"displayMode": "table", "placement": "right",
                               "calcs": ["lastNotNull", "max"]},
                    "tooltip": {"mode": "multi", "sort": "desc"}},
        "targets": targets(queries, exemplar=exemplar),
    }


def table(title, description, expr, value, columns=None, sort=True, unit="short", w=12, h=9):
    """An instant query as a table: the value column is named `value`, label columns renamed
    by `columns` ({label: heading}), Time and __name__ hidden; sorted by value, largest first,
    unless sort=False."""
    transformations = [{"id": "organize", "options": {
        "excludeByName": {"Time": True, "__name__": True},
        "renameByName": dict({"Value": value}, **(columns or {}))}}]
    if sort:
        transformations.append({"id": "sortBy", "options": {"sort": [{"field": value, "desc": True}]}})
    return w, h, {
        "type": "table", "title": title, "description": description,
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"showHeader": True, "cellHeight": "sm"},
        "targets": [target("A", expr, kind="instant", fmt="table")],
        "transformations": transformations,
    }


def bargauge(title, description, expr, legend, unit="short", w=12, h=9):
    return w, h, {
        "type": "bargauge", "title": title, "description": description,
        "fieldConfig": {"defaults": {"unit": unit, "min": 0}, "overrides": []},
        "options": {"orientation": "horizontal", "displayMode": "basic", "showUnfilled": True,
                    "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}},
        "targets": [target("A", expr, legend, kind="instant")],
    }


def state_timeline(title, description, expr, legend, states, w=24, h=9):
    """states: [(value, text, color), ...] for the value mapping."""
    return w, h, {
        "type": "state-timeline", "title": title, "description": description,
        "fieldConfig": {"defaults": {
            "unit": "none",
            "mappings": [{"type": "value", "options": {
                str(v): {"text": text, "color": color, "index": i}
                for i, (v, text, color) in enumerate(states)}}],
            "color": {"mode": "thresholds"},
            "thresholds": {"mode": "absolute", "steps": [{"color": states[0][2], "value": None}]},
        }, "overrides": []},
        "options": {"mergeValues": True, "showValue": "never", "alignValue": "left",
                    "rowHeight": 0.9,
                    "legend": {"showLegend": True, "displayMode": "list", "placement": "bottom"},
                    "tooltip": {"mode": "single", "sort": "none"}},
        "targets": [target("A", expr, legend)],
    }


def heatmap(title, description, expr, unit="s", w=12, h=9):
    """A heatmap of a histogram's buckets (format heatmap), with exemplars."""
    return w, h, {
        "type": "heatmap", "title": title, "description": description,
        "fieldConfig": {"defaults": {"unit": unit, "custom": {
            "hideFrom": {"legend": False, "tooltip": False, "viz": False},
            "scaleDistribution": {"type": "linear"}}}, "overrides": []},
        "options": dict(HEATMAP_OPTIONS, yAxis=dict(HEATMAP_OPTIONS["yAxis"], unit=unit)),
        "targets": [target("A", expr, "{{le}}", exemplar=True, fmt="heatmap")],
    }


HEATMAP_OPTIONS = {
    "calculate": False,
    "cellGap": 1,
    "yAxis": {"axisPlacement": "left", "unit": "s", "reverse": False},
    "rowsFrame": {"layout": "le"},
    "cellValues": {"unit": "ops"},
    "color": {"mode": "scheme", "scheme": "Oranges", "fill": "dark-orange", "scale": "exponential",
              "exponent": 0.5, "steps": 64, "reverse": False},
    "filterValues": {"le": 1e-09},
    "exemplars": {"color": "rgba(255,0,255,0.7)"},
    "tooltip": {"mode": "single", "yHistogram": False, "showColorScale": False},
    "legend": {"show": True},
}


# ---- shared rows ---------------------------------------------------------------------------

def self_monitoring(watches=True):
    """The last row of every dashboard: dralens watching itself. watches=False leaves out the
    watch restarts (the node role opens no watch)."""
    panels = [
        timeseries("Scrape duration p99",
                   "99th percentile of the time dralens spends rendering /metrics, per instance "
                   "and exposition format (dralens_scrape_duration_seconds).",
                   [("histogram_quantile(0.99, sum by (instance, format, le) "
                     "(rate(dralens_scrape_duration_seconds_bucket{S}[$__rate_interval])))",
                     "{{instance}} {{format}}")], unit="s"),
        timeseries("Kubernetes API requests by code",
                   "Requests to the Kubernetes API per second, by resource and HTTP status code; "
                   "\"error\" is a transport failure (dralens_kube_requests_total).",
                   [("sum by (resource, code) (rate(dralens_kube_requests_total{S}[$__rate_interval]))",
                     "{{resource}} {{code}}")], unit="reqps"),
    ]
    if watches:
        panels.append(timeseries(
            "Watch restarts",
            "Watch restarts per second by resource and reason (gone, dropped, error) "
            "(dralens_kube_watch_restarts_total).",
            [("sum by (resource, reason) (rate(dralens_kube_watch_restarts_total{S}[$__rate_interval]))",
              "{{resource}} {{reason}}")], unit="ops"))
    panels.append(timeseries(
        "Trace spans by outcome",
        "Finished spans per second by what became of them: exported, rejected, or dropped "
        "(dralens_otlp_spans_total). Drops feed the DralensOtlpExportFailing alert.",
        [("sum by (outcome) (rate(dralens_otlp_spans_total{S}[$__rate_interval]))", "{{outcome}}")],
        unit="ops"))
    return row("Self-monitoring", panels)


# ---- writing and checking ------------------------------------------------------------------

def load(path):
    spec = importlib.util.spec_from_file_location(
        "dralens_dashboard_" + os.path.basename(path)[:-3], path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not hasattr(module, "DASHBOARD"):
        raise ValueError(f"{path} defines no DASHBOARD")
    return module.DASHBOARD


def render(d):
    return json.dumps(d, indent=2, ensure_ascii=False) + "\n"


def metrics_of(panel):
    """The metric families a panel's queries read, in order of first use."""
    seen = []
    for t in panel.get("targets", []):
        for m in re.findall(r"\b(dralens_[a-z0-9_]+)", t["expr"]):
            m = re.sub(r"_(bucket|sum|count)$", "", m)
            if m not in seen:
                seen.append(m)
    return seen


def panel_table(dashboards):
    """The panel list of grafana/README.md: per dashboard, each panel and what it reads."""
    out = []
    for name, d in dashboards:
        out.append(f"### {name}.json: {d['title']} (`{d['uid']}`)\n\n")
        out.append("| row | panel | type | metrics |\n|---|---|---|---|\n")
        current = ""
        for p in d["panels"]:
            if p["type"] == "row":
                current = p["title"]
                continue
            metrics = ", ".join(f"`{m}`" for m in metrics_of(p))
            out.append(f"| {current} | {p['title']} | {p['type']} | {metrics} |\n")
        out.append("\n")
    return "".join(out).rstrip("\n") + "\n"


def readme_text(current, dashboards):
    begin, end = "<!-- panels:begin -->\n", "<!-- panels:end -->"
    b, e = current.find(begin), current.find(end)
    if b < 0 or e < b:
        raise ValueError(f"{README} has no {begin.strip()} ... {end} markers")
    return current[:b + len(begin)] + panel_table(dashboards) + current[e:]


def outputs(src=SRC, out=HERE):
    """{output path: text} for every definition in src, and the panel list of the README."""
    sys.path.insert(0, HERE)  # definitions import this module as `generate`
    result, dashboards = {}, []
    for path in sorted(glob.glob(os.path.join(src, "*.py"))):
        name = os.path.basename(path)[:-3]
        if name.startswith("_"):
            continue
        d = load(path)
        dashboards.append((name, d))
        result[os.path.join(out, name + ".json")] = render(d)
    readme = os.path.join(out, "README.md")
    if os.path.exists(readme):
        with open(readme, encoding="utf-8") as f:
            result[readme] = readme_text(f.read(), dashboards)
    return result


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare instead of writing")
    ap.add_argument("--src", default=SRC, help="folder of the definitions (default grafana/src)")
    ap.add_argument("--out", default=HERE, help="folder of the dashboards (default grafana)")
    args = ap.parse_args(argv)
    try:
        want = outputs(args.src, args.out)
    except (ValueError, SyntaxError, ImportError) as e:
        print(f"generate.py: {e}", file=sys.stderr)
        return 2
    problems = []
    for path, text in want.items():
        have = None
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                have = f.read()
        if have == text:
            continue
        if args.check:
            problems.append(f"{path}: " + ("missing" if have is None
                                           else "differs from its definition"))
        else:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
    for path in sorted(glob.glob(os.path.join(args.out, "*.json"))):
        if path not in want:
            if args.check:
                problems.append(f"{path}: no definition in {args.src}")
            else:
                os.unlink(path)
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        print("run `make generate` (or grafana/generate.py) and commit the result",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
