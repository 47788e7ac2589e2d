// Command promql-metrics parses PromQL expressions with Prometheus's own parser (the one
// promtool uses) and prints the metric names each one selects, so a test can check them
// against the names a running otel-injector exposes.
//
// Input (stdin): a JSON array of expressions. Output (stdout): a JSON array with one
// {"expr": ..., "metrics": [...]} per expression, names sorted and unique. An expression
// that does not parse, or that selects series by a regular expression or a negation on
// __name__ (whose names cannot be checked), is reported on stderr and the exit status is 1.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

type result struct {
	Expr    string   `json:"expr"`
	Metrics []string `json:"metrics"`
}

// names returns the metric names expr selects.
func names(p parser.Parser, expr string) ([]string, error) {
	ast, err := p.ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	found := []string{}
	var bad error
	parser.Inspect(ast, func(node parser.Node, _ []parser.Node) error {
		vs, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name != labels.MetricName {
				continue
			}
			if m.Type != labels.MatchEqual {
				bad = fmt.Errorf("selector %s matches metric names with %s; name them", vs, m.Type)
				return nil
			}
			name = m.Value
		}
		if name == "" {
			bad = fmt.Errorf("selector %s has no metric name", vs)
			return nil
		}
		found = append(found, name)
		return nil
	})
	if bad != nil {
		return nil, bad
	}
	slices.Sort(found)
	return slices.Compact(found), nil
}

func main() {
	var exprs []string
	if err := json.NewDecoder(os.Stdin).Decode(&exprs); err != nil {
		fmt.Fprintf(os.Stderr, "promql-metrics: stdin is not a JSON array of strings: %v\n", err)
		os.Exit(2)
	}
	p := parser.NewParser(parser.Options{})
	out := make([]result, 0, len(exprs))
	failed := false
	for _, e := range exprs {
		ms, err := names(p, e)
		if err != nil {
			fmt.Fprintf(os.Stderr, "promql-metrics: %q: %v\n", e, err)
			failed = true
			continue
		}
		out = append(out, result{Expr: e, Metrics: ms})
	}
	if failed {
		os.Exit(1)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		fmt.Fprintf(os.Stderr, "promql-metrics: %v\n", err)
		os.Exit(2)
	}
}
