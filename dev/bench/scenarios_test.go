package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// figureRE finds the headline names the package's code adds: literal names
// and the formats of numbered ones (%d for N and k). A name followed by
// "+suffix" is a prefix.
var figureRE = regexp.MustCompile(`(?:add\(|Sprintf\()"([a-z][a-z0-9_%]*_[a-z0-9_%]*)"(\+)?`)

// The table names every figure a run can print, and nothing else: a reader
// finds each name=value line of BENCHMARKS.md under its scenario.
func TestTableNamesEveryFigure(t *testing.T) {
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	inCode := map[string]bool{}
	prefixes := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") || f == "scenarios.go" {
			continue
		}
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range figureRE.FindAllStringSubmatch(string(src), -1) {
			if m[2] == "+" {
				prefixes[m[1]] = true
			} else {
				inCode[m[1]] = true
			}
		}
	}
	require.Contains(t, inCode, "pass_s_opstatus_x%d_n%d", "the pattern finds numbered figures")

	named := map[string]string{}
	for _, s := range append([]scenario{everyRun}, table...) {
		for _, f := range s.figures {
			format := strings.NewReplacer("<N>", "%d", "<k>", "%d").Replace(f)
			require.NotContains(t, named, format, "%s is under %s and %s", f, named[format], s.name)
			named[format] = s.name
			ok := inCode[format]
			for p := range prefixes {
				ok = ok || strings.HasPrefix(format, p)
			}
			require.True(t, ok, "%s (%s): no code adds it", f, s.name)
		}
	}
	for f := range inCode {
		_, ok := named[f]
		require.True(t, ok, "%s is printed but no scenario names it", f)
	}
	for p := range prefixes {
		n := 0
		for f := range named {
			if strings.HasPrefix(f, p) {
				n++
			}
		}
		require.Equal(t, 2, n, "%s…: both readings of maximumInstanceCount", p)
	}
}

// -h shows every scenario and every flag once, under its scenario.
func TestHelpShowsEveryScenarioAndFlag(t *testing.T) {
	_, err := parseFlags([]string{"-h"})
	require.True(t, errors.Is(err, flag.ErrHelp), "%v", err)

	var c config
	fs, sets := flagSets(&c)
	var sb strings.Builder
	printUsage(&sb, sets)
	help := sb.String()
	for _, s := range append([]scenario{everyRun}, table...) {
		require.Contains(t, help, "\n"+s.name, s.name)
		require.Contains(t, help, s.measures, s.name)
	}
	fs.VisitAll(func(f *flag.Flag) {
		require.Equal(t, 1, strings.Count(help, "  -"+f.Name+" ")+strings.Count(help, "  -"+f.Name+"\n"), "-%s", f.Name)
	})
	require.Equal(t, []string{"backlog", "pickupcold", "mixed"}, slowScenarios)
}

// A run takes the scenarios in the table's order, the perN ones for each
// N in turn, and only those -only selects.
func TestRunScenariosOrder(t *testing.T) {
	var got []string
	once := func(name string) scenario {
		return scenario{name: name, run: func(context.Context, *env, config, *results) error {
			got = append(got, name)
			return nil
		}}
	}
	perN := func(name string) scenario {
		return scenario{name: name, perN: func(_ context.Context, _ *env, _ config, _ *results, n int) error {
			got = append(got, fmt.Sprintf("%s@%d", name, n))
			return nil
		}}
	}
	tab := []scenario{once("coldstart"), perN("scan"), perN("opstatus"), perN("baseline"), once("holds"), once("budget")}
	only := map[string]bool{"coldstart": true, "scan": true, "baseline": true, "holds": true, "budget": true}
	require.NoError(t, runScenarios(context.Background(), tab, nil, config{ns: []int{1, 2}, only: only}, &results{}))
	require.Equal(t, []string{"coldstart", "scan@1", "baseline@1", "scan@2", "baseline@2", "holds", "budget"}, got)

	failing := once("holds")
	failing.run = func(context.Context, *env, config, *results) error { return errors.New("boom") }
	got = nil
	err := runScenarios(context.Background(), []scenario{failing, once("budget")}, nil, config{only: only}, &results{})
	require.ErrorContains(t, err, "boom")
	require.Empty(t, got, "a failed scenario ends the run")
	require.True(t, slices.Equal(scenarios, []string{"coldstart", "scan", "opstatus", "baseline", "holds", "backlog", "pickup", "pickupcold", "budget", "mixed"}), "%v", scenarios)
}

// TestDefaultsSetEveryNumber parses no flags and requires each number of
// the run's settings to be set, by a flag's default or a scenario's fixed
// values: a value no flag sets any more must still have one (a zero wait
// for the flip's updates once measured no freshness at all).
func TestDefaultsSetEveryNumber(t *testing.T) {
	cfg, err := parseFlags(nil)
	require.NoError(t, err)
	v := reflect.ValueOf(cfg)
	for i := range v.NumField() {
		switch f := v.Field(i); f.Kind() {
		case reflect.Int, reflect.Int64, reflect.Float64:
			require.False(t, f.IsZero(), "config.%s is zero by default", v.Type().Field(i).Name)
		}
	}
}
