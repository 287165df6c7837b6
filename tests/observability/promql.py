"""A small PromQL parser and the metric catalogue, shared by the dashboard and alert checks.

The parser covers the PromQL that dashboards and rules use: selectors, range and subquery
brackets, offset and @, function calls, aggregations with by/without, binary operators with
bool, on/ignoring and group_left/group_right, and comments. Grafana variables ($name, ${name})
are accepted wherever a string or a duration may stand. It builds a tree of plain objects that
the checks walk with each node's ancestors.
"""

import re

AGGREGATIONS = {
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
    "bottomk", "topk", "quantile", "limitk", "limit_ratio",
}
FUNCTIONS = {
    "abs", "absent", "absent_over_time", "avg_over_time", "ceil", "changes", "clamp",
    "clamp_max", "clamp_min", "count_over_time", "day_of_month", "day_of_week", "day_of_year",
    "days_in_month", "delta", "deriv", "exp", "floor", "group_over_time", "histogram_avg",
    "histogram_count", "histogram_fraction", "histogram_quantile", "histogram_sum",
    "holt_winters", "hour", "idelta", "increase", "irate", "label_join", "label_replace",
    "last_over_time", "ln", "log10", "log2", "max_over_time", "min_over_time", "minute",
    "month", "predict_linear", "present_over_time", "quantile_over_time", "rate", "resets",
    "round", "scalar", "sgn", "sort", "sort_desc", "sqrt", "stddev_over_time",
    "stdvar_over_time", "sum_over_time", "time", "timestamp", "vector", "year",
    "acos", "acosh", "asin", "asinh", "atan", "atanh", "cos", "cosh", "deg", "pi", "rad",
    "sin", "sinh", "tan", "tanh",
}
# Lowest precedence first; "^" is right-associative.
PRECEDENCE = [
    {"or"},
    {"and", "unless"},
    {"==", "!=", "<=", "<", ">=", ">"},
    {"+", "-"},
    {"*", "/", "%", "atan2"},
    {"^"},
]
COMPARISONS = {"==", "!=", "<=", "<", ">=", ">"}


class ParseError(Exception):
    pass


class Node:
    def children(self):
        return []


class Selector(Node):
    def __init__(self, name, matchers):
        self.name = name          # may be None when only {__name__=...} or labels are given
        self.matchers = matchers  # [(label, op, value)]

    def metric_names(self):
        if self.name:
            return [self.name]
        return [v for (l, op, v) in self.matchers if l == "__name__" and op == "="]


class Matrix(Node):
    def __init__(self, expr, range_, step):
        self.expr, self.range, self.step = expr, range_, step

    def children(self):
        return [self.expr]


class Call(Node):
    def __init__(self, func, args):
        self.func, self.args = func, args

    def children(self):
        return self.args


class Aggregation(Node):
    def __init__(self, op, args, grouping):
        self.op, self.args, self.grouping = op, args, grouping

    def children(self):
        return self.args


class Binary(Node):
    def __init__(self, op, lhs, rhs):
        self.op, self.lhs, self.rhs = op, lhs, rhs

    def children(self):
        return [self.lhs, self.rhs]


class Unary(Node):
    def __init__(self, op, expr):
        self.op, self.expr = op, expr

    def children(self):
        return [self.expr]


class Literal(Node):
    def __init__(self, value):
        self.value = value


_TOKEN = re.compile(r"""
    (?P<ws>\s+|\#[^\n]*)
  | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
  | (?P<var>\$\{[A-Za-z_][A-Za-z0-9_:.]*\}|\$[A-Za-z_][A-Za-z0-9_]*)
  | (?P<duration>(?:\d+(?:ms|s|m|h|d|w|y))+(?![A-Za-z0-9_]))
  | (?P<number>0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_:]*)
  | (?P<op>==|!=|<=|>=|=~|!~|[-+*/%^<>=(){}\[\],:@])
""", re.VERBOSE)


def tokenize(text):
    tokens, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise ParseError(f"unexpected character {text[pos]!r} at offset {pos}")
        pos = m.end()
        kind = m.lastgroup
        if kind != "ws":
            tokens.append((kind, m.group()))
    tokens.append(("eof", ""))
    return tokens


def _unquote(s):
    if s[0] == "`":
        return s[1:-1]
    return re.sub(r"\\(.)", r"\1", s[1:-1])


class _Parser:
    def __init__(self, text):
        self.toks = tokenize(text)
        self.i = 0

    def peek(self, k=0):
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def next(self):
        tok = self.toks[self.i]
        self.i += 1
        return tok

    def accept(self, value):
        if self.peek()[1] == value and self.peek()[0] in ("op", "ident"):
            self.i += 1
            return True
        return False

    def expect(self, value):
        if not self.accept(value):
            raise ParseError(f"expected {value!r}, got {self.peek()[1] or 'end of input'!r}")

    def parse(self):
        expr = self.binary(0)
        if self.peek()[0] != "eof":
            raise ParseError(f"unexpected {self.peek()[1]!r} after the expression")
        return expr

    def binary(self, level):
        if level == len(PRECEDENCE):
            return self.unary()
        lhs = self.binary(level + 1)
        while self.peek()[1] in PRECEDENCE[level] and self.peek()[0] in ("op", "ident"):
            op = self.next()[1]
            self.modifiers(op)
            # "^" is right-associative: parse its right side at the same level.
            rhs = self.binary(level if op == "^" else level + 1)
            lhs = Binary(op, lhs, rhs)
        return lhs

    def modifiers(self, op):
        if self.accept("bool") and op not in COMPARISONS:
            raise ParseError(f"bool modifier on non-comparison operator {op!r}")
        if self.accept("on") or self.accept("ignoring"):
            self.label_list()
            if self.accept("group_left") or self.accept("group_right"):
                if self.peek()[1] == "(":
                    self.label_list()

    def label_list(self):
        self.expect("(")
        labels = []
        while not self.accept(")"):
            kind, value = self.next()
            if kind != "ident":
                raise ParseError(f"expected a label name, got {value!r}")
            labels.append(value)
            if not self.accept(","):
                self.expect(")")
                break
        return labels

    def unary(self):
        if self.peek() in (("op", "-"), ("op", "+")):
            op = self.next()[1]
            return Unary(op, self.unary())
        return self.postfix(self.primary())

    def postfix(self, expr):
        while True:
            if self.accept("["):
                range_, step = self.duration(), None
                if self.accept(":"):
                    step = "" if self.peek()[1] == "]" else self.duration()
                elif not isinstance(expr, Selector):
                    raise ParseError("a range can only follow a vector selector")
                self.expect("]")
                expr = Matrix(expr, range_, step)
            elif self.accept("offset"):
                if self.peek() == ("op", "-"):
                    self.next()
                self.duration()
            elif self.accept("@"):
                kind, value = self.next()
                if kind == "ident" and value in ("start", "end"):
                    self.expect("(")
                    self.expect(")")
                elif kind not in ("number", "var"):
                    raise ParseError(f"bad @ modifier {value!r}")
            else:
                return expr

    def duration(self):
        kind, value = self.next()
        if kind not in ("duration", "var"):
            raise ParseError(f"expected a duration, got {value!r}")
        return value

    def primary(self):
        kind, value = self.peek()
        if kind == "number":
            self.next()
            return Literal(float.fromhex(value) if value[:2].lower() == "0x" else float(value))
        if kind == "string":
            self.next()
            return Literal(_unquote(value))
        if value == "(" and kind == "op":
            self.next()
            expr = self.binary(0)
            self.expect(")")
            return expr
        if value == "{" and kind == "op":
            return Selector(None, self.matchers())
        if kind == "ident":
            if value.lower() in ("inf", "nan"):
                self.next()
                return Literal(float(value))
            if value in AGGREGATIONS:
                return self.aggregation()
            if self.peek(1) == ("op", "("):
                if value not in FUNCTIONS:
                    raise ParseError(f"unknown function {value!r}")
                self.next()
                return Call(value, self.args())
            self.next()
            matchers = self.matchers() if self.peek() == ("op", "{") else []
            return Selector(value, matchers)
        raise ParseError(f"unexpected {value or 'end of input'!r}")

    def args(self):
        self.expect("(")
        args = []
        if self.accept(")"):
            return args
        while True:
            args.append(self.binary(0))
            if self.accept(")"):
                return args
            self.expect(",")

    def aggregation(self):
        op = self.next()[1]
        grouping = None
        if self.peek()[1] in ("by", "without"):
            grouping = (self.next()[1], self.label_list())
        args = self.args()
        if self.peek()[1] in ("by", "without") and grouping is None:
            grouping = (self.next()[1], self.label_list())
        if not args:
            raise ParseError(f"{op} needs an argument")
        return Aggregation(op, args, grouping)

    def matchers(self):
        self.expect("{")
        out = []
        while not self.accept("}"):
            kind, label = self.next()
            if kind != "ident" and kind != "string":
                raise ParseError(f"expected a label name, got {label!r}")
            kind, op = self.next()
            if op not in ("=", "!=", "=~", "!~"):
                raise ParseError(f"expected a label matcher operator after {label}, got {op!r}")
            kind, value = self.next()
            if kind != "string":
                raise ParseError(f"label {label} needs a quoted value, got {value!r}")
            out.append((label.strip('"'), op, _unquote(value)))
            if not self.accept(","):
                self.expect("}")
                break
        return out


def parse(text):
    """Parses a PromQL expression; raises ParseError with a message on invalid input."""
    return _Parser(text).parse()


def walk(node, parents=()):
    """Yields (node, ancestors) for every node, the root first."""
    yield node, parents
    for child in node.children():
        yield from walk(child, parents + (node,))


def selectors(node):
    return [n for n, _ in walk(node) if isinstance(n, Selector)]


# --- the catalogue ------------------------------------------------------------------------

class Metric:
    def __init__(self, name, kind, labels, role, help_text):
        self.name, self.kind, self.labels, self.role, self.help = name, kind, labels, role, help_text


def load_catalogue(path):
    """Reads the generated metric table of docs/metrics.md (checked against
    src/telemetry/catalog.cc)."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"<!-- metrics:begin -->(.*?)<!-- metrics:end -->", text, re.S)
    if not m:
        raise SystemExit(f"{path}: no metrics:begin/metrics:end table")
    catalogue = {}
    for line in m.group(1).splitlines():
        # | metric | type | labels | roles | stability | description |
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 6 or not cells[0].startswith("`"):
            continue
        name = cells[0].strip("`")
        labels = [l.strip().strip("`") for l in cells[2].split(",") if l.strip()]
        catalogue[name] = Metric(name, cells[1], labels, cells[3], cells[5])
    if not catalogue:
        raise SystemExit(f"{path}: the metric table is empty")
    return catalogue


# Labels every scraped series has, or may have, besides its own.
TARGET_LABELS = {"job", "instance", "cluster"}


def series_metric(catalogue, name):
    """Maps a series name to its catalogue family (histogram _bucket/_sum/_count), or None."""
    if name in catalogue:
        return catalogue[name]
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix):
            base = catalogue.get(name[: -len(suffix)])
            if base is not None and base.kind == "histogram":
                return base
    return None


def _words(text):
    return set(re.findall(r"[A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)*", text))


def known_label_values(catalogue, metric, label):
    """Values the catalogue names for a label: the metric's own help text, then the help texts
    of the metrics of the same role that share the label (e.g. result ok/error)."""
    words = _words(metric.help)
    for other in catalogue.values():
        if other is not metric and label in other.labels and other.role == metric.role:
            words |= _words(other.help)
    return words


# Labels whose values are object identities or free-form (names, versions), never checked.
IDENTITY_LABELS = {"device", "uuid", "parent", "node", "gpu", "namespace", "claim", "device_class",
                   "product", "profile", "numa_node", "pci_bus_id", "version", "driver", "code",
                   "le", "job", "instance", "cluster"}


def check_selector(catalogue, sel, extra_names, allowed_external):
    """Returns a list of problems with one selector: unknown metric, unknown label, or a label
    value that the catalogue does not name."""
    problems = []
    names = sel.metric_names()
    if not names:
        return [f"selector {{{sel.matchers}}} names no metric"]
    for name in names:
        if name in extra_names or name in allowed_external:
            continue
        metric = series_metric(catalogue, name)
        if metric is None:
            problems.append(f"metric {name} is not in the catalogue")
            continue
        allowed = set(metric.labels) | TARGET_LABELS | {"__name__"}
        if name.endswith("_bucket"):
            allowed.add("le")
        for label, op, value in sel.matchers:
            if label not in allowed:
                problems.append(f"{name} has no label {label}")
                continue
            if label in IDENTITY_LABELS or label == "__name__" or "$" in value:
                continue
            words = known_label_values(catalogue, metric, label)
            if op in ("=", "!="):
                alternatives = [value]
            else:
                alternatives = value.split("|")
            for alt in alternatives:
                try:
                    pattern = re.compile(alt if op in ("=~", "!~") else re.escape(alt))
                except re.error as e:
                    problems.append(f"{name}{{{label}{op}\"{value}\"}}: bad regex: {e}")
                    continue
                if not any(pattern.fullmatch(w) for w in words):
                    problems.append(
                        f"{name}{{{label}{op}\"{value}\"}}: {alt!r} is not a value the catalogue "
                        f"names for {label}")
    return problems
