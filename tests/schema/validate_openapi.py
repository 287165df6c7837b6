#!/usr/bin/python3
"""Validates a JSON document against one schema of the Kubernetes OpenAPI v3 document.

Usage: validate_openapi.py [--openapi FILE] SCHEMA_NAME JSON_FILE
  SCHEMA_NAME  e.g. io.k8s.api.resource.v1.ResourceSlice
  JSON_FILE    the instance to check
The OpenAPI file defaults to tests/schemas/k8s-resource.k8s.io-v1-openapi.json, the vendored
copy (tests/schemas/README.md).

Exit status: 0 when valid; 1 with one message per problem on stderr when not; 2 on usage errors.

Besides Draft 7 validation, it rejects what the OpenAPI document cannot express:
  * properties not declared by the schema (the document never sets additionalProperties:false,
    so a misspelled field would pass plain validation);
  * integers outside the int32/int64 range of their declared format.
"""

import argparse
import json
import os
import sys

import jsonschema

DEFAULT_OPENAPI = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "schemas",
                               "k8s-resource.k8s.io-v1-openapi.json")
INT_RANGES = {
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
}


def resolve(schema, components):
    """Follows $ref and merges allOf branches into one flat schema dict."""
    seen = set()
    while "$ref" in schema:
        ref = schema["$ref"]
        if ref in seen:
            break
        seen.add(ref)
        prefix = "#/components/schemas/"
        if not ref.startswith(prefix):
            raise ValueError("unsupported $ref %r" % ref)
        merged = dict(components[ref[len(prefix):]])
        for key, value in schema.items():
            if key != "$ref":
                merged.setdefault(key, value)
        schema = merged
    if "allOf" in schema:
        merged = {k: v for k, v in schema.items() if k != "allOf"}
        for branch in schema["allOf"]:
            part = resolve(branch, components)
            for key, value in part.items():
                if key == "properties":
                    merged.setdefault("properties", {}).update(value)
                elif key == "required":
                    merged.setdefault("required", []).extend(value)
                else:
                    merged.setdefault(key, value)
        schema = merged
    return schema


def path_str(path):
    out = ""
    for part in path:
        if isinstance(part, int):
            out += "[%d]" % part
        elif out:
            out += "." + part
        else:
            out = part
    return out or "(root)"


def walk(instance, schema, components, path, problems):
    """Checks undeclared properties and integer formats, recursing alongside the schema."""
    schema = resolve(schema, components)
    fmt = schema.get("format")
    if fmt in INT_RANGES and isinstance(instance, int) and not isinstance(instance, bool):
        low, high = INT_RANGES[fmt]
        if not low <= instance <= high:
            problems.append("%s: %d out of %s range" % (path_str(path), instance, fmt))
    if fmt in INT_RANGES and isinstance(instance, float):
        problems.append("%s: %r is not an %s integer" % (path_str(path), instance, fmt))
    if isinstance(instance, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, value in instance.items():
            if props is not None and key in props:
                walk(value, props[key], components, path + [key], problems)
            elif isinstance(extra, dict):
                walk(value, extra, components, path + [key], problems)
            elif props is not None and extra is not True:
                problems.append("%s: unknown field %r" % (path_str(path), key))
    elif isinstance(instance, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(instance):
            walk(item, schema["items"], components, path + [index], problems)


def validate(document, schema_name, instance):
    components = document["components"]["schemas"]
    if schema_name not in components:
        return ["unknown schema %r" % schema_name]
    wrapper = {"$ref": "#/components/schemas/" + schema_name,
               "components": document["components"]}
    validator = jsonschema.Draft7Validator(wrapper)
    problems = []
    for error in sorted(validator.iter_errors(instance), key=lambda e: list(e.path)):
        problems.append("%s: %s" % (path_str(list(error.path)), error.message))
    walk(instance, {"$ref": "#/components/schemas/" + schema_name}, components, [], problems)
    return problems


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--openapi", default=DEFAULT_OPENAPI, help="the OpenAPI v3 JSON document")
    parser.add_argument("schema_name")
    parser.add_argument("json_file")
    args = parser.parse_args(argv)
    openapi = args.openapi
    try:
        with open(openapi, encoding="utf-8") as f:
            document = json.load(f)
        with open(args.json_file, encoding="utf-8") as f:
            instance = json.load(f)
    except (OSError, ValueError) as e:
        print("error: %s" % e, file=sys.stderr)
        return 1
    problems = validate(document, args.schema_name, instance)
    for problem in problems:
        print("%s: %s" % (args.json_file, problem), file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
