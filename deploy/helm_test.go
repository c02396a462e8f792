//go:build helmchart

// The chart's typed tests: every rendered object decoded into the Kubernetes
// API types. They are behind the helmchart build tag because k8s.io/api and
// the Prometheus Operator's types are the largest compile of the module's
// tests (about a minute of CPU with an empty build cache, on the path of
// every test package that sorts after deploy); TestHelmChartTyped in
// helmchart_test.go runs them in the full run, and the short run lints and
// renders the chart without them.

package deploy

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	monv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/walbox/walbox/config"
	"github.com/walbox/walbox/internal/certtest"
)

// rendered is one `helm template`'s objects, decoded strictly.
type rendered struct {
	kinds          []string
	configMap      *corev1.ConfigMap
	secret         *corev1.Secret
	service        *corev1.Service
	deployment     *appsv1.Deployment
	pdb            *policyv1.PodDisruptionBudget
	serviceMonitor *monv1.ServiceMonitor
	prometheusRule *monv1.PrometheusRule
}

// strictDecode unmarshals one YAML document into out the way the API
// server's strict field validation does (sigs.k8s.io/json, case-sensitive),
// refusing a field the type does not have and a duplicate key. A misspelt
// key would otherwise vanish silently: the API server drops it.
// (encoding/json, and so sigs.k8s.io/yaml's UnmarshalStrict, match names
// case-insensitively: readOnlyRootFileSystem passes there.)
func strictDecode(doc []byte, out any) error {
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	strict, err := kjson.UnmarshalStrict(j, out, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

func decodeStrict(t *testing.T, doc []byte, out any) {
	t.Helper()
	if err := strictDecode(doc, out); err != nil {
		t.Errorf("strict decode into %T: %v\n%s", out, err, doc)
	}
}

// TestStrictDecode: the decoder the chart's tests use refuses what the API
// server would drop or refuse.
//
// Regression (issue 21): sigs.k8s.io/yaml's UnmarshalStrict, tried first,
// accepted readOnlyRootFileSystem (encoding/json matches names without
// case), so a misspelt security setting passed the test and would have
// been dropped by the API server.
func TestStrictDecode(t *testing.T) {
	tests := []struct {
		name    string
		doc     string
		wantErr string
	}{
		{name: "valid", doc: "securityContext:\n  readOnlyRootFilesystem: true\n"},
		{name: "wrong case", doc: "securityContext:\n  readOnlyRootFileSystem: true\n", wantErr: `unknown field "securityContext.readOnlyRootFileSystem"`},
		{name: "unknown field", doc: "securityContext:\n  readOnlyRootFS: true\n", wantErr: `unknown field`},
		{name: "duplicate key", doc: "image: a\nimage: b\n", wantErr: `key "image" already set`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c corev1.Container
			err := strictDecode([]byte(tt.doc), &c)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("error %v, want none", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

// render runs `helm lint --strict` and `helm template` with the values files
// and API versions, and decodes every object into its Kubernetes type.
func render(t *testing.T, helm string, values, apiVersions []string) rendered {
	t.Helper()
	var args []string
	for _, v := range values {
		args = append(args, "--values", v)
	}
	lint := append([]string{"lint", "--strict", chartDir}, args...)
	if out, err := exec.CommandContext(t.Context(), helm, lint...).CombinedOutput(); err != nil {
		t.Errorf("helm %s: %v\n%s", strings.Join(lint, " "), err, out)
	}
	for _, a := range apiVersions {
		args = append(args, "--api-versions", a)
	}
	tmpl := append([]string{"template", "walbox", chartDir, "--namespace", "cdc"}, args...)
	cmd := exec.CommandContext(t.Context(), helm, tmpl...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(tmpl, " "), err, stderr.String())
	}
	var r rendered
	for _, doc := range bytes.Split(out, []byte("\n---")) {
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal(doc, &head); err != nil {
			t.Fatalf("rendered document: %v\n%s", err, doc)
		}
		if head.Kind == "" {
			continue // only comments
		}
		r.kinds = append(r.kinds, head.Kind)
		var obj any
		switch head.APIVersion + " " + head.Kind {
		case "v1 ConfigMap":
			r.configMap = &corev1.ConfigMap{}
			obj = r.configMap
		case "v1 Secret":
			r.secret = &corev1.Secret{}
			obj = r.secret
		case "v1 Service":
			r.service = &corev1.Service{}
			obj = r.service
		case "apps/v1 Deployment":
			r.deployment = &appsv1.Deployment{}
			obj = r.deployment
		case "policy/v1 PodDisruptionBudget":
			r.pdb = &policyv1.PodDisruptionBudget{}
			obj = r.pdb
		case "monitoring.coreos.com/v1 ServiceMonitor":
			r.serviceMonitor = &monv1.ServiceMonitor{}
			obj = r.serviceMonitor
		case "monitoring.coreos.com/v1 PrometheusRule":
			r.prometheusRule = &monv1.PrometheusRule{}
			obj = r.prometheusRule
		default:
			t.Errorf("the chart renders %s %s, which the test does not decode", head.APIVersion, head.Kind)
			continue
		}
		decodeStrict(t, doc, obj)
	}
	slices.Sort(r.kinds)
	return r
}

// TestHelmChart lints and renders the chart with the default values, with
// the default values on a cluster that serves monitoring.coreos.com/v1, and
// with the TLS + SASL + exactly-once example, decodes every object strictly
// into the Kubernetes API types, and checks what the chart promises: two
// standby replicas whose probes let a standby be Ready, a restrictive
// security context, the configuration walbox itself accepts, every file the
// configuration names mounted, and the alert rules of
// prometheus/alerts.yaml.
func TestHelmChart(t *testing.T) {
	helm := helmBinary(t)
	tests := []struct {
		name        string
		values      []string
		apiVersions []string
		wantKinds   []string
	}{
		{name: "default values",
			wantKinds: []string{"ConfigMap", "Deployment", "PodDisruptionBudget", "Service"}},
		{name: "default values, Prometheus Operator installed",
			apiVersions: []string{"monitoring.coreos.com/v1"},
			wantKinds:   []string{"ConfigMap", "Deployment", "PodDisruptionBudget", "PrometheusRule", "Service", "ServiceMonitor"}},
		{name: "TLS, SASL and exactly-once",
			values:    []string{chartDir + "/ci/tls-sasl-exactly-once-values.yaml"},
			wantKinds: []string{"ConfigMap", "Deployment", "PodDisruptionBudget", "PrometheusRule", "Secret", "Service", "ServiceMonitor"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := render(t, helm, tt.values, tt.apiVersions)
			if !slices.Equal(r.kinds, tt.wantKinds) {
				t.Fatalf("rendered %v, want %v", r.kinds, tt.wantKinds)
			}
			checkDeployment(t, r)
			checkConfig(t, r)
			if r.prometheusRule != nil {
				checkRules(t, r.prometheusRule)
			}
			if sm := r.serviceMonitor; sm != nil {
				if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != r.service.Spec.Ports[0].Name {
					t.Errorf("ServiceMonitor endpoints %+v do not scrape the Service's port %q", sm.Spec.Endpoints, r.service.Spec.Ports[0].Name)
				}
			}
		})
	}
}

func checkDeployment(t *testing.T, r rendered) {
	t.Helper()
	d := r.deployment
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("replicas %v, want 2", d.Spec.Replicas)
	}
	if ru := d.Spec.Strategy.RollingUpdate; ru == nil || ru.MaxUnavailable.String() != "0" || ru.MaxSurge.String() != "1" {
		t.Errorf("rolling update %+v, want maxSurge 1 and maxUnavailable 0 (a new standby before an old pod goes)", ru)
	}
	pod := d.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	// Readiness must hold for a standby: /readyz is 503 for it by design.
	for name, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" || p.HTTPGet.Port.String() != "metrics" {
			t.Errorf("%s probe %+v, want GET /healthz on the metrics port", name, p)
		}
	}
	if r.pdb.Spec.MaxUnavailable == nil || r.pdb.Spec.MaxUnavailable.String() != "1" || r.pdb.Spec.UnhealthyPodEvictionPolicy == nil || *r.pdb.Spec.UnhealthyPodEvictionPolicy != policyv1.AlwaysAllow {
		t.Errorf("PodDisruptionBudget %+v, want maxUnavailable 1 and unhealthyPodEvictionPolicy AlwaysAllow", r.pdb.Spec)
	}
	if !reflect.DeepEqual(r.pdb.Spec.Selector.MatchLabels, d.Spec.Selector.MatchLabels) {
		t.Errorf("the PodDisruptionBudget selects %v, the Deployment %v", r.pdb.Spec.Selector.MatchLabels, d.Spec.Selector.MatchLabels)
	}

	psc, sc := pod.SecurityContext, c.SecurityContext
	switch {
	case psc == nil || sc == nil:
		t.Fatal("no security context")
	case psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser != 65532:
		t.Errorf("pod security context %+v, want runAsNonRoot and uid 65532", psc)
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Error("the root filesystem is writable")
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Error("privilege escalation is allowed")
	case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
		t.Errorf("capabilities %+v, want all dropped, none added", sc.Capabilities)
	}

	// Sized from the measured peak RSS with the default flags (at most
	// 41.8 MiB, docs/performance.md): the request covers it, the limit
	// leaves room for a larger window.
	const peakRSS = 41.8 * (1 << 20)
	req, lim := c.Resources.Requests.Memory(), c.Resources.Limits.Memory()
	if req.IsZero() || lim.IsZero() || float64(req.Value()) < 1.2*peakRSS || lim.Value() < 2*req.Value() {
		t.Errorf("memory request %s and limit %s, want the request at least 1.2 × the peak RSS of 41.8 MiB and the limit twice the request", req, lim)
	}
	if grace := pod.TerminationGracePeriodSeconds; grace == nil || *grace <= 30 {
		t.Errorf("terminationGracePeriodSeconds %v, want more than walbox's 30 s shutdown timeout", grace)
	}
}

// checkConfig loads the ConfigMap's walbox.yaml with walbox's own loader,
// with the Deployment's arguments and environment, in a directory that holds
// what the volumes mount: the ConfigMap's and the chart's Secret's keys,
// and for the TLS Secrets a CA certificate, a certificate and its key. walbox
// reads every file the configuration names, so a path no volume provides
// fails here as it would in the pod.
func checkConfig(t *testing.T, r rendered) {
	t.Helper()
	data, ok := r.configMap.Data["walbox.yaml"]
	if !ok {
		t.Fatalf("the ConfigMap has no walbox.yaml: %v", r.configMap.Data)
	}
	root := t.TempDir()
	write := func(dir, name string, content []byte) {
		t.Helper()
		path := filepath.Join(root, dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, content, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	read := func(path string) []byte {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	c := r.deployment.Spec.Template.Spec.Containers[0]
	for _, m := range c.VolumeMounts {
		i := slices.IndexFunc(r.deployment.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
		if i < 0 {
			t.Errorf("volume mount %s names no volume", m.Name)
			continue
		}
		v := r.deployment.Spec.Template.Spec.Volumes[i]
		if !m.ReadOnly && !(v.EmptyDir != nil && m.MountPath == "/tmp") {
			t.Errorf("volume %s is mounted read-write", v.Name)
		}
		switch {
		case v.EmptyDir != nil && m.MountPath == "/tmp":
			// The spool of streamed transactions (--spool-dir's default
			// under /tmp): the one writable place, empty at start.
		case v.ConfigMap != nil && v.ConfigMap.Name == r.configMap.Name:
			for k, val := range r.configMap.Data {
				write(m.MountPath, k, []byte(strings.ReplaceAll(val, "/etc/walbox/", root+"/etc/walbox/")))
			}
		case v.Secret != nil && r.secret != nil && v.Secret.SecretName == r.secret.Name:
			for k, val := range r.secret.StringData {
				write(m.MountPath, k, []byte(val))
			}
		case v.Secret != nil && strings.HasPrefix(m.MountPath, "/etc/walbox/tls/"):
			// A kubernetes.io/tls Secret with a ca.crt, as the values
			// document (cert-manager's keys).
			ca := certtest.NewCA(t, v.Name)
			pair := ca.Client(t, "walbox")
			write(m.MountPath, "ca.crt", read(ca.CertFile))
			write(m.MountPath, "tls.crt", read(pair.CertFile))
			write(m.MountPath, "tls.key", read(pair.KeyFile))
		default:
			t.Errorf("volume %s (%+v) is mounted at %s, and the test does not know its files", v.Name, v.VolumeSource, m.MountPath)
		}
	}
	if len(c.Args) != 3 || c.Args[0] != "run" || c.Args[1] != "--config" {
		t.Fatalf("args %q, want run --config <the mounted walbox.yaml>", c.Args)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	cfg, err := config.Load([]string{"--config", filepath.Join(root, c.Args[2])}, func(k string) string { return env[k] }, &bytes.Buffer{})
	if err != nil {
		t.Fatalf("walbox refuses the chart's configuration: %v\n%s", err, data)
	}
	if !cfg.Standby {
		t.Error("the configuration does not set standby with two replicas")
	}
	if want := "0.0.0.0:9187"; cfg.MetricsAddr != want || c.Ports[0].ContainerPort != 9187 {
		t.Errorf("metrics on %s, container port %d; want %s", cfg.MetricsAddr, c.Ports[0].ContainerPort, want)
	}
}

// checkRules checks that the PrometheusRule's groups are those of
// prometheus/alerts.yaml, the one source of the rules.
func checkRules(t *testing.T, pr *monv1.PrometheusRule) {
	t.Helper()
	data, err := os.ReadFile("prometheus/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var want monv1.PrometheusRuleSpec
	decodeStrict(t, data, &want)
	if len(want.Groups) == 0 || len(want.Groups[0].Rules) == 0 {
		t.Fatal("no rules in prometheus/alerts.yaml")
	}
	if !reflect.DeepEqual(pr.Spec, want) {
		t.Errorf("the PrometheusRule's groups differ from prometheus/alerts.yaml;\ngot:  %+v\nwant: %+v", pr.Spec, want)
	}
}
