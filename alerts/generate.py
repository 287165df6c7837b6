#!/usr/bin/python3
"""Renders alerts/config.yaml, the one definition of dralens's Prometheus rules, into the files
built from it (listed at the top of config.yaml).

  generate.py            write every generated file (what `make generate` runs)
  generate.py --check    change nothing; exit 1 naming every generated file that differs

render_test_overrides.py and the chart test import this module: load() reads and checks a
configuration, rules() builds the rules document from it with optional overrides, and
rules_text() writes that document as YAML.
"""

import argparse
import decimal
import json
import os
import re
import sys
import textwrap

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CONFIG = os.path.join(HERE, "config.yaml")
RULES = os.path.join(HERE, "dralens.rules.yaml")
CHART = os.path.join(ROOT, "charts", "dralens")
CHART_RULES = os.path.join(CHART, "files", "alerts", "dralens.rules.yaml")
VALUES = os.path.join(CHART, "values.yaml")
SCHEMA = os.path.join(CHART, "values.schema.json")
README = os.path.join(HERE, "README.md")

SEVERITIES = ("critical", "warning", "info")
DURATION = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")
ALERT_NAME = re.compile(r"^[A-Z][A-Za-z0-9]*$")
PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
ALERT_KEYS = {"alert", "enabled", "for", "severity", "threshold", "thresholdDoc", "expr",
              "summary", "description"}
REQUIRED = ("alert", "enabled", "for", "severity", "expr", "summary", "description")
VALUES_BEGIN = "# alerts:begin"
VALUES_END = "# alerts:end"
TABLE_BEGIN = "<!-- alerts:begin -->\n"
TABLE_END = "<!-- alerts:end -->"


class ConfigError(Exception):
    pass


def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def format_number(v):
    """A threshold as the chart prints it: Go's %v of a float64 (Helm reads every number in
    values as float64), the shortest digits that read back exactly, with an exponent below 1e-4
    and from 1e6 on: 900, 0.5, 1e-06, 1e+06, 1.5e+07. PromQL reads all of these."""
    f = float(v)
    if f == 0:
        return "0"
    sign, digits, exp = decimal.Decimal(repr(f)).normalize().as_tuple()
    digits = "".join(map(str, digits))
    point = len(digits) + exp  # digits before the decimal point
    minus = "-" if sign else ""
    if point - 1 < -4 or point - 1 >= 6:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        e = point - 1
        return f"{minus}{mantissa}e{'-' if e < 0 else '+'}{abs(e):02d}"
    if point <= 0:
        return f"{minus}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return minus + digits + "0" * (point - len(digits))
    return f"{minus}{digits[:point]}.{digits[point:]}"


def check(config):
    """Raises ConfigError naming the first thing wrong with a configuration."""
    def need(cond, message):
        if not cond:
            raise ConfigError(message)

    need(isinstance(config, dict), "the configuration is not a mapping")
    unknown = set(config) - {"runbookBaseUrl", "selectors", "recording", "groups"}
    need(not unknown, f"unknown top-level key(s): {', '.join(sorted(unknown))}")
    base = config.get("runbookBaseUrl")
    need(isinstance(base, str) and re.match(r"^https?://[^\s#]+$", base or ""),
         f"runbookBaseUrl {base!r} is not an absolute http(s) URL without a fragment")
    selectors = config.get("selectors") or {}
    need(isinstance(selectors, dict) and all(isinstance(v, str) and v for v in selectors.values()),
         "selectors must map names to non-empty label matchers")
    need("threshold" not in selectors, "'threshold' cannot be a selector name")

    def check_placeholders(where, expr, allowed):
        for name in PLACEHOLDER.findall(expr):
            need(name in allowed, f"{where}: unknown placeholder ${{{name}}} "
                                  f"(known: {', '.join(sorted(allowed))})")

    for i, rec in enumerate(config.get("recording") or []):
        need(isinstance(rec, dict) and set(rec) == {"record", "expr"},
             f"recording rule #{i + 1} must have exactly record and expr")
        check_placeholders(rec["record"], rec["expr"], set(selectors))
    groups = config.get("groups")
    need(isinstance(groups, list) and groups, "groups must be a non-empty list")
    seen = set()
    for g in groups:
        need(isinstance(g, dict) and set(g) == {"name", "alerts"} and isinstance(g["alerts"], list),
             f"group {g!r} must have exactly name and a list of alerts")
        for a in g["alerts"]:
            need(isinstance(a, dict), f"group {g['name']}: an alert is not a mapping")
            name = a.get("alert")
            need(isinstance(name, str) and ALERT_NAME.match(name),
                 f"group {g['name']}: alert name {name!r} is not CamelCase")
            need(name not in seen, f"{name} is defined twice")
            seen.add(name)
            unknown = set(a) - ALERT_KEYS
            need(not unknown, f"{name}: unknown key(s) {', '.join(sorted(unknown))}")
            missing = [k for k in REQUIRED if k not in a]
            need(not missing, f"{name}: missing {', '.join(missing)}")
            need(isinstance(a["enabled"], bool), f"{name}: enabled must be true or false")
            need(isinstance(a["for"], str) and DURATION.match(a["for"]),
                 f"{name}: for {a['for']!r} is not a Prometheus duration")
            need(a["severity"] in SEVERITIES,
                 f"{name}: severity {a['severity']!r} is not one of {', '.join(SEVERITIES)}")
            for key in ("expr", "summary", "description"):
                need(isinstance(a[key], str) and a[key].strip(), f"{name}: {key} is empty")
            has = "threshold" in a
            need(has == ("thresholdDoc" in a), f"{name}: threshold and thresholdDoc go together")
            if has:
                need(is_number(a["threshold"]), f"{name}: threshold {a['threshold']!r} is not a number")
            lines = [ln for ln in a["expr"].splitlines() if "${threshold}" in ln]
            need(len(lines) == (1 if has else 0),
                 f"{name}: " + ("the expression must hold ${threshold} once" if has
                                else "${threshold} in the expression needs a threshold"))
            if has:
                need(lines[0].rstrip().endswith("${threshold}"),
                     f"{name}: ${{threshold}} must end its line of the expression")
            check_placeholders(name, a["expr"], set(selectors) | {"threshold"})
    return config


def load(path=CONFIG):
    with open(path, encoding="utf-8") as f:
        try:
            config = yaml.safe_load(f)
        except yaml.YAMLError as e:
            raise ConfigError(f"{path}: not YAML: {e}")
    return check(config)


def alerts(config):
    return [a for g in config["groups"] for a in g["alerts"]]


def runbook_url(base, name):
    return f"{base}#{name.lower()}"


def substitute(expr, values):
    def one(m):
        return values[m.group(1)]
    return PLACEHOLDER.sub(one, expr)


def rules(config, overrides=None, include_disabled=False):
    """The rules document. overrides: {"for": {alert: dur}, "threshold": {alert: num},
    "severity": {alert: sev}, "enabled": {alert: bool}, "selectors": {name: matcher},
    "runbookBaseUrl": url}; names must exist (callers check)."""
    o = overrides or {}
    selectors = dict(config.get("selectors") or {}, **o.get("selectors", {}))
    base = o.get("runbookBaseUrl", config["runbookBaseUrl"])
    groups = []
    if config.get("recording"):
        groups.append({"name": "dralens.recording", "rules": [
            {"record": r["record"], "expr": substitute(r["expr"], selectors)}
            for r in config["recording"]]})
    for g in config["groups"]:
        out = []
        for a in g["alerts"]:
            name = a["alert"]
            if not (o.get("enabled", {}).get(name, a["enabled"]) or include_disabled):
                continue
            values = dict(selectors)
            if "threshold" in a:
                t = o.get("threshold", {}).get(name, a["threshold"])
                values["threshold"] = f"{format_number(t)}  # threshold"
            out.append({
                "alert": name,
                "expr": substitute(a["expr"], values),
                "for": o.get("for", {}).get(name, a["for"]),
                "labels": {"severity": o.get("severity", {}).get(name, a["severity"])},
                "annotations": {
                    "summary": a["summary"].strip(),
                    "description": a["description"].strip(),
                    "runbook_url": runbook_url(base, name),
                },
            })
        if out:
            groups.append({"name": g["name"], "rules": out})
    return {"groups": groups}


# ---- YAML output: block scalars as a person would write them -----------------------------

def scalar(v):
    """A one-line scalar: plain where YAML reads it back unchanged, else double-quoted."""
    if isinstance(v, bool) or is_number(v):
        return json.dumps(v)
    text = str(v)
    dumped = yaml.safe_dump(text, default_flow_style=True, width=10**6).strip()
    if dumped.endswith("\n...") or dumped.endswith("..."):
        dumped = dumped.rsplit("\n", 1)[0].strip()
    return dumped


def literal(indent, text):
    """A `|` block (expressions): the text's lines, kept as they are."""
    body = text if text.endswith("\n") else text + "\n"
    pad = " " * indent
    return "|\n" + "".join(pad + ln + "\n" if ln else "\n" for ln in body.splitlines())


def words(text):
    """The text split at single spaces outside {{ }} template actions, so that no action is
    folded across lines."""
    out, current, depth, i = [], "", 0, 0
    while i < len(text):
        if text.startswith("{{", i):
            depth, current, i = depth + 1, current + "{{", i + 2
        elif text.startswith("}}", i) and depth:
            depth, current, i = depth - 1, current + "}}", i + 2
        elif text[i] == " " and not depth:
            out.append(current)
            current, i = "", i + 1
        else:
            current, i = current + text[i], i + 1
    return out + [current]


def folded(indent, text, width=100):
    """A `>-` block (descriptions) folded at spaces; reads back as the same one-line text."""
    if "  " in text or text != text.strip() or "\n" in text:
        raise ValueError(f"cannot fold {text!r}: double spaces or line breaks")
    lines, line = [], ""
    for w in words(text):
        if line and indent + len(line) + 1 + len(w) > width:
            lines.append(line)
            line = w
        else:
            line = f"{line} {w}" if line else w
    lines.append(line)
    pad = " " * indent
    return ">-\n" + "".join(pad + ln + "\n" for ln in lines)


def rules_text(doc, header):
    out = [header]
    out.append("groups:\n")
    for i, g in enumerate(doc["groups"]):
        if i:
            out.append("\n")
        out.append(f"  - name: {scalar(g['name'])}\n    rules:\n")
        for j, r in enumerate(g["rules"]):
            if "record" in r:
                out.append(f"      - record: {scalar(r['record'])}\n")
                out.append("        expr: " + literal(10, r["expr"]))
                continue
            if j:
                out.append("\n")
            out.append(f"      - alert: {scalar(r['alert'])}\n")
            out.append("        expr: " + literal(10, r["expr"]))
            out.append(f"        for: {scalar(r['for'])}\n")
            out.append("        labels:\n")
            for k, v in r["labels"].items():
                out.append(f"          {k}: {scalar(v)}\n")
            out.append("        annotations:\n")
            for k, v in r["annotations"].items():
                if k == "description":
                    out.append(f"          {k}: " + folded(12, v))
                else:
                    out.append(f"          {k}: {scalar(v)}\n")
    text = "".join(out)
    if yaml.safe_load(text) != doc:  # the writer must never change what it writes
        raise AssertionError("rules_text does not read back as the document it wrote")
    return text


RULES_HEADER = """\
# dralens Prometheus rules: recording rules first, then alerts grouped by area.
# Generated by alerts/generate.py from alerts/config.yaml: edit that file and run
# `make generate`; a test fails when this file drifts from it.
#
# Each alert has a severity label and summary, description and runbook_url annotations; its
# one tunable number, if any, ends its line of the expression, marked `# threshold`. The node
# DaemonSet is scraped as job="dralens-node". Recording rules are named level:metric:operations.
"""

CHART_RULES_HEADER = """\
# Every dralens alert, enabled or not, with its default for:, severity and threshold (the
# number marked `# threshold`). templates/prometheusrules.yaml applies the chart's
# alerts.<name>.* values to it; with the default values the result is alerts/dralens.rules.yaml.
# Generated by alerts/generate.py from alerts/config.yaml; do not edit.
"""


# ---- the chart's values and schema ---------------------------------------------------------

def doc_comment(indent, text, width=100):
    """A `# --` values.yaml comment, wrapped; the chart README's values table joins it again."""
    pad = " " * indent
    lines = textwrap.wrap(text, width=width - indent - 5, break_long_words=False,
                          break_on_hyphens=False)
    return f"{pad}# -- {lines[0]}\n" + "".join(f"{pad}# {ln}\n" for ln in lines[1:])


def values_block(config):
    out = [f"{VALUES_BEGIN} (generated by alerts/generate.py from alerts/config.yaml; edit that)\n",
           "# The bundled alerts (monitoring.prometheusRule.enabled). alerts/README.md says what each\n",
           "# watches; alerts/runbook.md what to do when it fires.\n",
           "alerts:\n",
           "  # -- Base of every alert's runbook_url, which is `<base>#<alert name in lower case>`;\n",
           "  # point it at your own copy of alerts/runbook.md to add your site's steps.\n",
           f"  runbookBaseUrl: {scalar(config['runbookBaseUrl'])}\n"]
    for a in alerts(config):
        name = a["alert"]
        out.append(f"  {name}:\n")
        out.append(doc_comment(4, f"Create {name}: {a['summary'].strip()}"))
        out.append(f"    enabled: {scalar(a['enabled'])}\n")
        out.append(doc_comment(4, f"How long the condition must hold before {name} fires."))
        out.append(f"    for: {scalar(a['for'])}\n")
        out.append(doc_comment(4, f"Severity label of {name}: critical, warning or info."))
        out.append(f"    severity: {scalar(a['severity'])}\n")
        if "threshold" in a:
            out.append(doc_comment(4, f"{name} threshold: {a['thresholdDoc']}."))
            out.append(f"    threshold: {json.dumps(a['threshold'])}\n")
    out.append(VALUES_END + "\n")
    return "".join(out)


def replace_between(text, begin, end, block, where):
    b = text.find(begin)
    e = text.find(end)
    if b < 0 or e < b:
        raise ConfigError(f"{where} has no {begin.strip()} ... {end.strip()} markers")
    line_end = text.index("\n", e) + 1 if "\n" in text[e:] else len(text)
    return text[:b] + block + text[line_end:]


def values_text(config, current):
    return replace_between(current, VALUES_BEGIN, VALUES_END, values_block(config), VALUES)


def schema_for(config):
    props = {"runbookBaseUrl": {"type": "string", "pattern": "^https?://[^\\s#]+$"}}
    for a in alerts(config):
        p = {
            "enabled": {"type": "boolean"},
            "for": {"type": "string", "pattern": DURATION.pattern},
            "severity": {"enum": list(SEVERITIES)},
        }
        if "threshold" in a:
            p["threshold"] = {"type": "number"}
        props[a["alert"]] = {"type": "object", "additionalProperties": False, "properties": p}
    return {"type": "object", "additionalProperties": False, "properties": props}


def schema_text(config, current):
    try:
        doc = json.loads(current)
    except ValueError as e:
        raise ConfigError(f"{SCHEMA}: not JSON: {e}")
    props = doc["properties"]
    props["alerts"] = schema_for(config)
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


# ---- the alert table of alerts/README.md ---------------------------------------------------

def table(config):
    rows = ["| alert | severity | for | threshold (default) | summary |", "|---|---|---|---|---|"]
    for a in alerts(config):
        name = a["alert"]
        link = f"[{name}](runbook.md#{name.lower()})"
        t = f"{format_number(a['threshold'])}: {a['thresholdDoc']}" if "threshold" in a else "-"
        on = "" if a["enabled"] else " (disabled)"
        rows.append(f"| {link}{on} | {a['severity']} | {a['for']} | {t} | {a['summary'].strip()} |")
    return "\n".join(rows) + "\n"


def readme_text(config, current):
    return replace_between(current, TABLE_BEGIN, TABLE_END, TABLE_BEGIN + table(config) + TABLE_END + "\n",
                           README)


# ---- main --------------------------------------------------------------------------------

def outputs(config):
    """{path: expected content} for every generated file."""
    def read(path):
        with open(path, encoding="utf-8") as f:
            return f.read()
    return {
        RULES: rules_text(rules(config), RULES_HEADER),
        CHART_RULES: rules_text(rules(config, include_disabled=True), CHART_RULES_HEADER),
        VALUES: values_text(config, read(VALUES)),
        SCHEMA: schema_text(config, read(SCHEMA)),
        README: readme_text(config, read(README)),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare instead of writing")
    ap.add_argument("--config", default=CONFIG)
    args = ap.parse_args()
    try:
        config = load(args.config)
        want = outputs(config)
    except ConfigError as e:
        print(f"generate.py: {e}", file=sys.stderr)
        return 2
    drift = []
    for path, text in want.items():
        have = None
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                have = f.read()
        if have == text:
            continue
        if args.check:
            drift.append(os.path.relpath(path, ROOT))
        else:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
    if drift:
        for p in drift:
            print(f"{p}: differs from what alerts/generate.py makes of alerts/config.yaml",
                  file=sys.stderr)
        print("run `make generate` (or alerts/generate.py) and commit the result", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
