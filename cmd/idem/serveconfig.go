package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/idemdev/idem/gateway"
)

// routeFlags are the flags a route of a --config file may set, under the
// same names and with the same values; a route inherits the others' values
// from the command line.
var routeFlags = []string{
	"require-key", "key-from", "exclude", "scope-header", "anonymous-scope", "methods",
	"lease", "retention", "stale", "on-5xx", "release-status", "on-conflict", "wait-timeout",
	"max-body", "max-response", "max-inflight", "allow-headers",
}

// policyFlags are the command's flags a route's policy reads but cannot
// set: the key set of --scope-header jwt:CLAIM, the CAs of client-cert.
var policyFlags = []string{"jwt-keys", "client-ca"}

// loadRoutes reads and checks a --config file. fs holds the command's
// flags: the defaults every route inherits. Every error names the file
// and line, and the route when there is one.
func loadRoutes(fs *flag.FlagSet, file string) ([]gateway.Route, []error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, []error{fmt.Errorf("--config: %v", err)}
	}
	return parseRoutes(fs, file, b)
}

func parseRoutes(fs *flag.FlagSet, file string, b []byte) ([]gateway.Route, []error) {
	at := func(n *yaml.Node, format string, args ...any) error {
		return fmt.Errorf("%s:%d: %s", file, n.Line, fmt.Sprintf(format, args...))
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, []error{fmt.Errorf("%s: %s", file, strings.TrimPrefix(err.Error(), "yaml: "))} // "line N: …"
	}
	if len(doc.Content) == 0 {
		return nil, []error{fmt.Errorf("%s: empty: want a routes: list", file)}
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, []error{at(root, "want a mapping with a routes: list")}
	}
	var errs []error
	var list *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		if k := root.Content[i]; k.Value == "routes" {
			list = root.Content[i+1]
		} else {
			errs = append(errs, at(k, "unknown key %q (want routes)", k.Value))
		}
	}
	switch {
	case list == nil:
		return nil, append(errs, fmt.Errorf("%s: no routes: list", file))
	case list.Kind != yaml.SequenceNode:
		return nil, append(errs, at(list, "routes: want a list of routes"))
	}
	var routes []gateway.Route
	seen := map[string]int{} // pattern → line
	check := http.NewServeMux()
	for _, n := range list.Content {
		rt, rerrs := parseRoute(fs, n, at)
		errs = append(errs, rerrs...)
		if len(rerrs) > 0 {
			continue
		}
		if line, dup := seen[rt.Pattern]; dup {
			errs = append(errs, at(n, "route %q: already given on line %d", rt.Pattern, line))
			continue
		}
		if err := tryPattern(check, rt.Pattern); err != nil {
			errs = append(errs, at(n, "route %q: %v", rt.Pattern, err))
			continue
		}
		seen[rt.Pattern] = n.Line
		routes = append(routes, rt)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return routes, nil
}

// tryPattern tries pattern on mux, as the gateway will: a malformed pattern
// or one that conflicts with an earlier route is an error.
func tryPattern(mux *http.ServeMux, pattern string) (err error) {
	defer func() {
		if p := recover(); p != nil {
			msg := fmt.Sprint(p)
			if i := strings.Index(msg, " (registered at "); i >= 0 { // the mux names its caller's source line, not the file's
				if j := strings.Index(msg[i:], ")"); j >= 0 {
					msg = msg[:i] + msg[i+j+1:]
				}
			}
			err = errors.New(strings.TrimPrefix(msg, "http: "))
		}
	}()
	mux.Handle(pattern, http.NotFoundHandler())
	return nil
}

// parseRoute reads one route: its pattern, whether it is guarded, and its
// flags over the command's.
func parseRoute(fs *flag.FlagSet, n *yaml.Node, at func(*yaml.Node, string, ...any) error) (gateway.Route, []error) {
	var rt gateway.Route
	if n.Kind != yaml.MappingNode {
		return rt, []error{at(n, "a route is a mapping with route: \"METHOD /path\" and its settings")}
	}
	var errs []error
	vals := map[string]*yaml.Node{}
	var patternNode *yaml.Node
	guard := true
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if _, dup := vals[k.Value]; dup || (k.Value == "route" && patternNode != nil) {
			errs = append(errs, at(k, "%s given twice in one route", k.Value))
			continue
		}
		switch {
		case k.Value == "route":
			if v.Kind != yaml.ScalarNode || strings.TrimSpace(v.Value) == "" {
				errs = append(errs, at(v, "route: want a pattern such as \"POST /payments/{id}\""))
				continue
			}
			patternNode = v
			rt.Pattern = strings.TrimSpace(v.Value)
		case k.Value == "guard":
			if v.Kind != yaml.ScalarNode || (v.Value != "true" && v.Value != "false") {
				errs = append(errs, at(v, "guard: want true or false"))
				continue
			}
			guard = v.Value == "true"
			vals[k.Value] = v
		case isRouteFlag(k.Value):
			vals[k.Value] = v
		default:
			errs = append(errs, at(k, "unknown setting %q (want route, guard or one of: %s)", k.Value, strings.Join(routeFlags, ", ")))
		}
	}
	if patternNode == nil {
		return rt, append(errs, at(n, "route without route: \"METHOD /path\""))
	}
	name := func(format string, args ...any) string {
		return fmt.Sprintf("route %q: ", rt.Pattern) + fmt.Sprintf(format, args...)
	}
	for i, e := range errs { // name the route in what was found before its pattern
		errs[i] = fmt.Errorf("%w (route %q)", e, rt.Pattern)
	}
	rt.Pass = !guard

	// The route's policy is the command's flags with the route's values
	// set over them, checked by the same code as the flags.
	rfs, rc := serveFlags(io.Discard)
	for _, f := range slices.Concat(routeFlags, policyFlags) {
		if err := rfs.Set(f, fs.Lookup(f).Value.String()); err != nil {
			errs = append(errs, at(patternNode, "%s", name("--%s: %v", f, err)))
		}
	}
	method, _, hasMethod := strings.Cut(rt.Pattern, " ")
	if hasMethod {
		if v := vals["methods"]; v != nil {
			errs = append(errs, at(v, "%s", name("methods: the pattern already says %s; give methods only with a pattern without one", method)))
		} else if err := rfs.Set("methods", method); err != nil {
			errs = append(errs, at(patternNode, "%s", name("%v", err)))
		}
	}
	setFailed := false
	for f, v := range vals {
		if f == "guard" {
			continue
		}
		s, err := scalarOrList(v)
		if err == nil {
			err = rfs.Set(f, s)
		}
		if err != nil {
			errs = append(errs, at(v, "%s", name("%s: %v", f, err)))
			setFailed = true
		}
	}
	if setFailed {
		return rt, errs
	}
	for _, err := range rc.policy() {
		var fe *flagError
		switch {
		case errors.As(err, &fe) && vals[fe.flag] != nil:
			errs = append(errs, at(vals[fe.flag], "%s", name("%s: %s", fe.flag, fe.reason)))
		case errors.As(err, &fe):
			errs = append(errs, at(patternNode, "%s", name("%s (inherited from --%s): %s", fe.flag, fe.flag, fe.reason)))
		default:
			errs = append(errs, at(patternNode, "%s", name("%v", err)))
		}
	}
	if rt.Pass && len(vals) > 1 {
		for f, v := range vals {
			if f != "guard" {
				errs = append(errs, at(v, "%s", name("%s: the route is not guarded (guard: false), so it has no effect", f)))
			}
		}
	}
	if len(errs) > 0 {
		return rt, errs
	}
	if !rt.Pass {
		o := rc.idemOpts
		rt.Options = &o
	}
	return rt, nil
}

func isRouteFlag(name string) bool { return slices.Contains(routeFlags, name) }

// scalarOrList is a YAML value as a flag takes it: a scalar as it is, a
// list of scalars joined by commas.
func scalarOrList(v *yaml.Node) (string, error) {
	switch v.Kind {
	case yaml.ScalarNode:
		return v.Value, nil
	case yaml.SequenceNode:
		var parts []string
		for _, e := range v.Content {
			if e.Kind != yaml.ScalarNode || strings.Contains(e.Value, ",") {
				return "", errors.New("want a list of plain values")
			}
			parts = append(parts, e.Value)
		}
		return strings.Join(parts, ","), nil
	}
	return "", errors.New("want a value or a list of values")
}
