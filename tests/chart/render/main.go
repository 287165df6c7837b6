// render: renders a Helm chart the way `helm template` does, for tests on machines without a
// helm binary. It uses the same engines Helm uses (Go text/template and sprig) and implements
// the Helm built-ins our chart needs:
//
//	.Values (values.yaml, then each -f file merged over it; a null deletes a key)
//	.Release, .Chart (from Chart.yaml), .Capabilities (KubeVersion, APIVersions.Has),
//	.Template, .Files (Get, GetBytes, Glob, AsConfig, AsSecrets, Lines)
//	include, tpl, required, toYaml, fromYaml, fromYamlArray, toJson, fromJson
//
// Not implemented: lookup, subcharts, hooks, values.schema.json validation (the python test
// validates the merged values instead), and Helm's kind-based ordering of the output.
//
// Usage: render -chart DIR [-f values.yaml]... [-name R] [-namespace N] [-kube-version v1.34.0]
//
//	[-strict] [-notes]
//
// Prints every rendered template that is not empty, each as a YAML document headed by
// "# Source: <chart>/templates/<file>", or with -notes the rendered NOTES.txt.
package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig"
	"gopkg.in/yaml.v2"
)

type valueFiles []string

func (v *valueFiles) String() string     { return strings.Join(*v, ",") }
func (v *valueFiles) Set(s string) error { *v = append(*v, s); return nil }

// Files is the chart's non-template files, keyed by their slash path inside the chart.
type Files map[string][]byte

func (f Files) GetBytes(name string) []byte { return f[name] }
func (f Files) Get(name string) string      { return string(f[name]) }

// Glob matches with path.Match, which agrees with Helm's matcher for patterns without "**".
func (f Files) Glob(pattern string) Files {
	out := Files{}
	for name, data := range f {
		if ok, _ := path.Match(pattern, name); ok {
			out[name] = data
		}
	}
	return out
}

// AsConfig is a ConfigMap's data: base name -> content, as YAML.
func (f Files) AsConfig() string {
	if len(f) == 0 {
		return ""
	}
	m := map[string]string{}
	for name, data := range f {
		m[path.Base(name)] = string(data)
	}
	return toYAML(m)
}

// AsSecrets is a Secret's data: base name -> base64 content, as YAML.
func (f Files) AsSecrets() string {
	if len(f) == 0 {
		return ""
	}
	m := map[string]string{}
	for name, data := range f {
		m[path.Base(name)] = base64.StdEncoding.EncodeToString(data)
	}
	return toYAML(m)
}

func (f Files) Lines(name string) []string {
	s := strings.TrimRight(string(f[name]), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// APIVersions answers .Capabilities.APIVersions.Has.
type APIVersions []string

func (a APIVersions) Has(v string) bool {
	for _, x := range a {
		if x == v {
			return true
		}
	}
	return false
}

// normalize turns decoded YAML into what Helm's sigs.k8s.io/yaml produces: string-keyed maps
// and float64 numbers (Helm decodes YAML through JSON).
func normalize(in interface{}) (interface{}, error) {
	var walk func(interface{}) (interface{}, error)
	walk = func(v interface{}) (interface{}, error) {
		switch t := v.(type) {
		case map[interface{}]interface{}:
			m := map[string]interface{}{}
			for k, e := range t {
				n, err := walk(e)
				if err != nil {
					return nil, err
				}
				m[fmt.Sprint(k)] = n
			}
			return m, nil
		case []interface{}:
			for i, e := range t {
				n, err := walk(e)
				if err != nil {
					return nil, err
				}
				t[i] = n
			}
			return t, nil
		}
		return v, nil
	}
	w, err := walk(in)
	if err != nil {
		return nil, err
	}
	data, err := json.Marshal(w)
	if err != nil {
		return nil, err
	}
	var out interface{}
	err = json.Unmarshal(data, &out)
	return out, err
}

func parseYAML(data []byte) (interface{}, error) {
	var raw interface{}
	if err := yaml.Unmarshal(data, &raw); err != nil {
		return nil, err
	}
	return normalize(raw)
}

// toYAML is Helm's toYaml: through JSON (so keys come out sorted and struct tags apply), then
// YAML, without the trailing newline. Errors render as "", as in Helm.
func toYAML(v interface{}) string {
	data, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	var obj interface{}
	if err := yaml.Unmarshal(data, &obj); err != nil {
		return ""
	}
	out, err := yaml.Marshal(obj)
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(string(out), "\n")
}

func fromYAML(s string) map[string]interface{} {
	v, err := parseYAML([]byte(s))
	if err != nil {
		return map[string]interface{}{"Error": err.Error()}
	}
	m, ok := v.(map[string]interface{})
	if !ok {
		if v == nil {
			return map[string]interface{}{}
		}
		return map[string]interface{}{"Error": "not a YAML mapping"}
	}
	return m
}

func fromYAMLArray(s string) []interface{} {
	v, err := parseYAML([]byte(s))
	if err != nil {
		return []interface{}{err.Error()}
	}
	a, _ := v.([]interface{})
	return a
}

func fromJSON(s string) map[string]interface{} {
	m := map[string]interface{}{}
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		m["Error"] = err.Error()
	}
	return m
}

// merge lays `over` onto `base` as Helm coalesces user values: maps merge key by key, anything
// else replaces, and a null deletes the key.
func merge(base, over map[string]interface{}) map[string]interface{} {
	for k, v := range over {
		if v == nil {
			delete(base, k)
			continue
		}
		bm, bok := base[k].(map[string]interface{})
		om, ook := v.(map[string]interface{})
		if bok && ook {
			base[k] = merge(bm, om)
		} else {
			base[k] = v
		}
	}
	return base
}

func loadMap(file string) (map[string]interface{}, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	v, err := parseYAML(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if v == nil {
		return map[string]interface{}{}, nil
	}
	m, ok := v.(map[string]interface{})
	if !ok {
		return nil, fmt.Errorf("%s: the top level must be a mapping", file)
	}
	return m, nil
}

// chartMeta maps Chart.yaml's keys to the field names templates use (.Chart.AppVersion, ...).
func chartMeta(dir string) (map[string]interface{}, error) {
	raw, err := loadMap(filepath.Join(dir, "Chart.yaml"))
	if err != nil {
		return nil, err
	}
	meta := map[string]interface{}{}
	for k, v := range raw {
		switch k {
		case "apiVersion":
			meta["APIVersion"] = v
		case "appVersion":
			meta["AppVersion"] = v
		case "kubeVersion":
			meta["KubeVersion"] = v
		default:
			meta[strings.ToUpper(k[:1])+k[1:]] = v
		}
	}
	if meta["Name"] == nil || meta["Version"] == nil {
		return nil, errors.New("Chart.yaml: name and version are required")
	}
	return meta, nil
}

// loadFiles reads what Helm exposes as .Files: everything except templates/, Chart.yaml,
// values.yaml and values.schema.json.
func loadFiles(dir string) (Files, error) {
	files := Files{}
	err := filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if strings.HasPrefix(rel, "templates/") || rel == "Chart.yaml" || rel == "values.yaml" ||
			rel == "values.schema.json" {
			return nil
		}
		data, err := os.ReadFile(p)
		files[rel] = data
		return err
	})
	return files, err
}

func run() error {
	var overrides valueFiles
	chartDir := flag.String("chart", "", "chart directory")
	flag.Var(&overrides, "f", "values file merged over values.yaml (repeatable)")
	name := flag.String("name", "dralens", "release name")
	namespace := flag.String("namespace", "dralens-system", "release namespace")
	kubeVersion := flag.String("kube-version", "v1.34.0", "Kubernetes version for .Capabilities")
	strict := flag.Bool("strict", false, "fail on a missing map key instead of rendering it empty")
	notes := flag.Bool("notes", false, "print the rendered NOTES.txt instead of the manifests")
	flag.Parse()
	if *chartDir == "" {
		return errors.New("-chart is required")
	}

	chart, err := chartMeta(*chartDir)
	if err != nil {
		return err
	}
	values, err := loadMap(filepath.Join(*chartDir, "values.yaml"))
	if err != nil {
		return err
	}
	for _, f := range overrides {
		m, err := loadMap(f)
		if err != nil {
			return err
		}
		values = merge(values, m)
	}
	files, err := loadFiles(*chartDir)
	if err != nil {
		return err
	}
	major, minor := "1", "34"
	if parts := strings.Split(strings.TrimPrefix(*kubeVersion, "v"), "."); len(parts) >= 2 {
		major, minor = parts[0], parts[1]
	}
	top := map[string]interface{}{
		"Values": values,
		"Chart":  chart,
		"Files":  files,
		"Release": map[string]interface{}{
			"Name": *name, "Namespace": *namespace, "Service": "Helm", "Revision": 1,
			"IsInstall": true, "IsUpgrade": false,
		},
		"Capabilities": map[string]interface{}{
			"KubeVersion": map[string]interface{}{
				"Version": *kubeVersion, "GitVersion": *kubeVersion, "Major": major, "Minor": minor,
			},
			"APIVersions": APIVersions{"v1", "apps/v1", "rbac.authorization.k8s.io/v1",
				"admissionregistration.k8s.io/v1", "coordination.k8s.io/v1", "resource.k8s.io/v1"},
			"HelmVersion": map[string]interface{}{"Version": "v3"},
		},
	}

	chartName := fmt.Sprint(chart["Name"])
	root := template.New("chart")
	if *strict {
		root.Option("missingkey=error")
	} else {
		root.Option("missingkey=zero")
	}
	funcs := sprig.TxtFuncMap()
	delete(funcs, "env")
	delete(funcs, "expandenv")
	includeDepth := 0
	funcs["include"] = func(name string, data interface{}) (string, error) {
		if includeDepth > 1000 {
			return "", fmt.Errorf("include %q: too deeply nested", name)
		}
		includeDepth++
		defer func() { includeDepth-- }()
		var buf bytes.Buffer
		if err := root.ExecuteTemplate(&buf, name, data); err != nil {
			return "", err
		}
		return buf.String(), nil
	}
	funcs["tpl"] = func(text string, data interface{}) (string, error) {
		t, err := root.Clone()
		if err != nil {
			return "", err
		}
		t, err = t.New("tpl").Parse(text)
		if err != nil {
			return "", fmt.Errorf("tpl: %w", err)
		}
		var buf bytes.Buffer
		if err := t.Execute(&buf, data); err != nil {
			return "", fmt.Errorf("tpl: %w", err)
		}
		return strings.ReplaceAll(buf.String(), "<no value>", ""), nil
	}
	funcs["required"] = func(msg string, v interface{}) (interface{}, error) {
		if v == nil {
			return nil, errors.New(msg)
		}
		if s, ok := v.(string); ok && s == "" {
			return nil, errors.New(msg)
		}
		return v, nil
	}
	funcs["toYaml"] = toYAML
	funcs["fromYaml"] = fromYAML
	funcs["fromYamlArray"] = fromYAMLArray
	funcs["fromJson"] = fromJSON
	root.Funcs(funcs)

	entries, err := os.ReadDir(filepath.Join(*chartDir, "templates"))
	if err != nil {
		return err
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(*chartDir, "templates", e.Name()))
		if err != nil {
			return err
		}
		tname := chartName + "/templates/" + e.Name()
		if _, err := root.New(tname).Parse(string(data)); err != nil {
			return err
		}
		names = append(names, tname)
	}
	sort.Strings(names)

	render := func(tname string) (string, error) {
		ctx := map[string]interface{}{}
		for k, v := range top {
			ctx[k] = v
		}
		ctx["Template"] = map[string]interface{}{
			"Name": tname, "BasePath": chartName + "/templates",
		}
		var buf bytes.Buffer
		if err := root.ExecuteTemplate(&buf, tname, ctx); err != nil {
			return "", err
		}
		return strings.ReplaceAll(buf.String(), "<no value>", ""), nil
	}

	var out strings.Builder
	for _, tname := range names {
		base := path.Base(tname)
		isNotes := base == "NOTES.txt"
		if strings.HasPrefix(base, "_") || isNotes != *notes {
			continue
		}
		text, err := render(tname)
		if err != nil {
			return err
		}
		if isNotes {
			out.WriteString(text)
			continue
		}
		if strings.TrimSpace(text) == "" {
			continue
		}
		fmt.Fprintf(&out, "---\n# Source: %s\n%s\n", tname, strings.TrimRight(text, "\n"))
	}
	_, err = os.Stdout.WriteString(out.String())
	return err
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "render:", err)
		os.Exit(1)
	}
}
