#!/usr/bin/python3
"""Validates CDI spec files against the official CDI JSON schema (schema.json + defs.json).

Usage: validate_cdi.py [--schema-dir DIR] FILE...
The schemas are DIR/cdi/schema.json and DIR/cdi/defs.json; DIR defaults to tests/schemas, the
vendored copies (tests/schemas/README.md).

Exit status: 0 when every file is valid; 1 with one message per problem on stderr when not;
2 on usage errors (missing schema, unreadable file, not JSON).

schema.json refers to defs.json by a relative reference, so both are registered under a common
base URI and resolved locally; nothing is fetched from the network.
"""

import argparse
import json
import os
import sys

import jsonschema

BASE = "file:///cdi/"
SCHEMA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "schemas")


def load_validator(schema_dir):
    folder = os.path.join(schema_dir, "cdi")
    with open(os.path.join(folder, "schema.json"), encoding="utf-8") as f:
        schema = json.load(f)
    with open(os.path.join(folder, "defs.json"), encoding="utf-8") as f:
        defs = json.load(f)
    store = {BASE + "schema.json": schema, BASE + "defs.json": defs}
    try:
        # jsonschema >= 4.18 prefers the `referencing` registry.
        from referencing import Registry, Resource  # type: ignore
        from referencing.jsonschema import DRAFT7  # type: ignore

        registry = Registry().with_resources(
            [(uri, Resource.from_contents(doc, default_specification=DRAFT7))
             for uri, doc in store.items()])
        return jsonschema.Draft7Validator({"$ref": BASE + "schema.json"}, registry=registry)
    except ImportError:
        resolver = jsonschema.RefResolver(base_uri=BASE + "schema.json", referrer=schema,
                                          store=store)
        return jsonschema.Draft7Validator(schema, resolver=resolver)


def path_str(path):
    out = ""
    for part in path:
        out += "[%d]" % part if isinstance(part, int) else ("." + part if out else part)
    return out or "(root)"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schema-dir", default=SCHEMA_DIR)
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    try:
        validator = load_validator(args.schema_dir)
    except OSError as e:
        print("validate_cdi: cannot load schema: %s" % e, file=sys.stderr)
        return 2
    failed = False
    for name in args.files:
        try:
            with open(name, encoding="utf-8") as f:
                instance = json.load(f)
        except (OSError, ValueError) as e:
            print("validate_cdi: %s: %s" % (name, e), file=sys.stderr)
            return 2
        for error in sorted(validator.iter_errors(instance), key=lambda e: list(e.path)):
            print("%s: %s: %s" % (name, path_str(error.path), error.message), file=sys.stderr)
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
