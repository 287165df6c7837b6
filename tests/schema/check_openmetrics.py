#!/usr/bin/python3
"""Parses an OpenMetrics 1.0 exposition with the prometheus_client reference parser.

Usage: check_openmetrics.py FILE

The parser is strict: it rejects a missing `# EOF`, a counter sample without `_total`, an
exemplar on a gauge, exemplar labels over 128 characters, bad escaping, and out-of-order
histogram buckets. On success it prints one line per exemplar, `<sample name> <trace_id>`, so a
test can check which samples carry one. Exit status: 0 valid, 1 invalid (message on stderr),
2 usage.
"""

import sys

from prometheus_client.openmetrics.parser import text_string_to_metric_families


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    with open(sys.argv[1], encoding="utf-8") as f:
        text = f.read()
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.exemplar is not None:
                    print(sample.name, sample.exemplar.labels.get("trace_id", ""))
    except ValueError as e:
        print(f"invalid OpenMetrics: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
