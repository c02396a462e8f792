package deploy

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.yaml.in/yaml/v3"

	"github.com/walbox/walbox/heartbeat"
	"github.com/walbox/walbox/internal/version"
	"github.com/walbox/walbox/pipeline"
	"github.com/walbox/walbox/retention"
	"github.com/walbox/walbox/slotctl"
	"github.com/walbox/walbox/tracing"
)

// metricRE matches the metric names the files may use: walbox's own and
// the process collector's.
var metricRE = regexp.MustCompile(`\b(?:walbox|process|go)_[a-z0-9_]+\b`)

// registered returns the names walbox run's registry exposes: the relay's
// metrics and the Go and process collectors, with a histogram's series
// names (_bucket, _sum, _count).
func registered(t *testing.T) map[string]bool {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfg := pipeline.DefaultConfig()
	cfg.ConnString = "postgres://localhost/postgres"
	cfg.Slot, cfg.Publication = slotctl.DefaultSlot, slotctl.DefaultPublication
	cfg.Tables = []string{slotctl.DefaultTable}
	if _, err := pipeline.New(cfg, nil, nil, reg, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	// The heartbeat monitor's gauges (walbox_slot_lag_bytes,
	// walbox_heartbeat_lag_seconds), registered as walbox run does.
	if _, err := heartbeat.New(10*time.Second, slotctl.DefaultSlot, nil, func() bool { return false }, reg, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	// The trailing slot's keeper (--replay-window).
	cc, err := pgx.ParseConfig("postgres://localhost/postgres")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := retention.New(retention.Config{Slot: slotctl.DefaultSlot, Window: time.Hour}, cc, func() pglogrepl.LSN { return 0 }, reg, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	// The tracer's span counters (--tracing), with the SDK's in-memory
	// exporter instead of a collector.
	tr := tracing.NewWithExporter(tracing.Config{}, tracetest.NewInMemoryExporter(), nil, nil, nil, reg)
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	// walbox_build_info, registered by walbox run next to the collectors.
	if err := version.Register(reg, version.Get()); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, f := range families {
		names[f.GetName()] = true
		if f.GetType().String() == "HISTOGRAM" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[f.GetName()+s] = true
			}
		}
	}
	return names
}

// alertMetrics returns the metric names the alert rules' expressions use.
func alertMetrics(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile("prometheus/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(data, &rules); err != nil {
		t.Fatalf("prometheus/alerts.yaml: %v", err)
	}
	var names []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			names = append(names, metricRE.FindAllString(r.Expr, -1)...)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// TestAlertMetricsExist catches a misspelt metric in an alert, which would
// make it silently never fire (absent() aside, a rule on a missing series
// is just empty).
func TestAlertMetricsExist(t *testing.T) {
	reg := registered(t)
	names := alertMetrics(t)
	if len(names) == 0 {
		t.Fatal("no metric names found in the alert rules")
	}
	for _, n := range names {
		if !reg[n] {
			t.Errorf("alerts.yaml uses %s, which walbox does not export", n)
		}
	}
}

// TestDashboardMetricsExist parses the Grafana dashboard and checks that
// every metric its queries use is exported by walbox or used by the alerts.
func TestDashboardMetricsExist(t *testing.T) {
	data, err := os.ReadFile("grafana/walbox.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("grafana/walbox.json: %v", err)
	}
	known := registered(t)
	for _, n := range alertMetrics(t) {
		known[n] = true
	}
	var exprs []string
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("panel %q has an empty query", p.Title)
			}
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		if q, ok := v.Query.(string); ok {
			exprs = append(exprs, q)
		}
	}
	if len(dash.Panels) == 0 {
		t.Fatal("the dashboard has no panels")
	}
	found := 0
	for _, e := range exprs {
		for _, n := range metricRE.FindAllString(e, -1) {
			found++
			if !known[n] {
				t.Errorf("grafana/walbox.json uses %s, which walbox does not export and no alert uses (in %q)", n, e)
			}
		}
	}
	if found == 0 {
		t.Fatal("no metric names found in the dashboard")
	}
}
