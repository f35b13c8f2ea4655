package helm_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/cli/values"
	"helm.sh/helm/v3/pkg/getter"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"helm.sh/helm/v3/pkg/releaseutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/oncegate/oncegate/internal/config"
)

const (
	chartDir  = "oncegate"
	release   = "og"
	namespace = "oncegate"
)

// valuesFiles are the documented values files; each must render and lint.
var valuesFiles = []string{"values-kv.yaml", "values-badger.yaml"}

// missingDependency is the one lint finding allowed: the NATS chart is an
// optional dependency that is not vendored (helm dependency build fetches
// it), so the charts/ directory does not hold it.
const missingDependency = "chart directory is missing these dependencies: nats"

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	c, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("loading the chart: %v", err)
	}
	return c
}

// mergeValues merges the values files (relative to the chart) and the
// --set style assignments as helm install -f … --set … does.
func mergeValues(t *testing.T, files []string, set ...string) map[string]any {
	t.Helper()
	o := values.Options{Values: set}
	for _, f := range files {
		o.ValueFiles = append(o.ValueFiles, filepath.Join(chartDir, f))
	}
	v, err := o.MergeValues(getter.Providers{})
	if err != nil {
		t.Fatalf("values %v %v: %v", files, set, err)
	}
	return v
}

// render renders the chart as helm install --dry-run with no cluster
// (helm template) does, and returns the manifests.
func render(t *testing.T, files []string, set ...string) ([]string, error) {
	t.Helper()
	inst := action.NewInstall(&action.Configuration{})
	inst.DryRun, inst.ClientOnly, inst.Replace = true, true, true
	inst.ReleaseName, inst.Namespace = release, namespace
	rel, err := inst.Run(loadChart(t), mergeValues(t, files, set...))
	if err != nil {
		return nil, err
	}
	split := releaseutil.SplitManifests(rel.Manifest)
	keys := make([]string, 0, len(split))
	for k := range split {
		keys = append(keys, k)
	}
	sort.Sort(releaseutil.BySplitManifestsOrder(keys))
	var out []string
	for _, k := range keys {
		if strings.TrimSpace(split[k]) != "" {
			out = append(out, split[k])
		}
	}
	return out, nil
}

// objects are the decoded manifests of one rendering.
type objects struct {
	deployments     []appsv1.Deployment
	statefulSets    []appsv1.StatefulSet
	configMaps      []corev1.ConfigMap
	services        []corev1.Service
	serviceAccounts []corev1.ServiceAccount
	ingresses       []networkingv1.Ingress
	pdbs            []policyv1.PodDisruptionBudget
	serviceMonitors []monitoringv1.ServiceMonitor
	rules           []monitoringv1.PrometheusRule
}

// decodeInto decodes a manifest strictly (an unknown or duplicated field
// is an error) and appends it to list.
func decodeInto[T any](list *[]T, doc string) error {
	var v T
	if err := yaml.UnmarshalStrict([]byte(doc), &v); err != nil {
		return err
	}
	*list = append(*list, v)
	return nil
}

// decode decodes every manifest into its Kubernetes API type; a kind the
// chart is not expected to make is an error.
func decode(t *testing.T, docs []string) *objects {
	t.Helper()
	o := &objects{}
	for _, doc := range docs {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			t.Fatalf("manifest does not parse: %v\n%s", err, doc)
		}
		var err error
		switch tm.APIVersion + " " + tm.Kind {
		case "apps/v1 Deployment":
			err = decodeInto(&o.deployments, doc)
		case "apps/v1 StatefulSet":
			err = decodeInto(&o.statefulSets, doc)
		case "v1 ConfigMap":
			err = decodeInto(&o.configMaps, doc)
		case "v1 Service":
			err = decodeInto(&o.services, doc)
		case "v1 ServiceAccount":
			err = decodeInto(&o.serviceAccounts, doc)
		case "networking.k8s.io/v1 Ingress":
			err = decodeInto(&o.ingresses, doc)
		case "policy/v1 PodDisruptionBudget":
			err = decodeInto(&o.pdbs, doc)
		case "monitoring.coreos.com/v1 ServiceMonitor":
			err = decodeInto(&o.serviceMonitors, doc)
		case "monitoring.coreos.com/v1 PrometheusRule":
			err = decodeInto(&o.rules, doc)
		default:
			t.Errorf("unexpected object %s %s\n%s", tm.APIVersion, tm.Kind, doc)
			continue
		}
		if err != nil {
			t.Errorf("%s %s does not decode strictly: %v\n%s", tm.APIVersion, tm.Kind, err, doc)
		}
	}
	return o
}

func mustRender(t *testing.T, files []string, set ...string) *objects {
	t.Helper()
	docs, err := render(t, files, set...)
	if err != nil {
		t.Fatalf("rendering with %v %v: %v", files, set, err)
	}
	return decode(t, docs)
}

// TestLint: helm lint passes on every documented values file, with the
// values schema applied, and finds nothing but the NATS chart left out of
// charts/.
func TestLint(t *testing.T) {
	for _, f := range append([]string{""}, valuesFiles...) {
		t.Run(cmpName(f), func(t *testing.T) {
			var files []string
			if f != "" {
				files = []string{f}
			}
			l := lint.All(chartDir, mergeValues(t, files), namespace, false)
			for _, m := range l.Messages {
				if m.Severity >= support.WarningSev && !strings.Contains(m.Err.Error(), missingDependency) {
					t.Errorf("lint: %s", m)
				}
			}
		})
	}
}

func cmpName(f string) string {
	if f == "" {
		return "values.yaml"
	}
	return f
}

// TestRenderStrict: each documented values file renders, every manifest
// decodes strictly into its API type, and the configuration it carries
// loads with Oncegate's own loader.
func TestRenderStrict(t *testing.T) {
	for _, f := range valuesFiles {
		t.Run(f, func(t *testing.T) {
			o := mustRender(t, []string{f})
			if len(o.configMaps) != 1 {
				t.Fatalf("%d ConfigMaps; want 1", len(o.configMaps))
			}
			checkConfig(t, o.configMaps[0])
		})
	}
}

// checkConfig loads the rendered oncegate.yaml as the consumer would, and
// checks what the chart sets in it.
func checkConfig(t *testing.T, cm corev1.ConfigMap) *config.Config {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, v, _ := strings.Cut(kv, "="); strings.HasPrefix(k, config.EnvPrefix) || strings.HasPrefix(k, "NATS_") {
			t.Setenv(k, v)
			os.Unsetenv(k)
		}
	}
	path := filepath.Join(t.TempDir(), "oncegate.yaml")
	if err := os.WriteFile(path, []byte(cm.Data["oncegate.yaml"]), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatalf("the rendered configuration does not load: %v\n%s", err, cm.Data["oncegate.yaml"])
	}
	if cfg.DataDir != "/var/lib/oncegate" || cfg.Metrics.Listen != "0.0.0.0:9464" || cfg.NATS.URL == "" {
		t.Errorf("data_dir %q, metrics.listen %q, nats.url %q; want /var/lib/oncegate, 0.0.0.0:9464 and a URL",
			cfg.DataDir, cfg.Metrics.Listen, cfg.NATS.URL)
	}
	return cfg
}

// pod returns the one pod template of a rendering, and its workload's
// replicas.
func pod(t *testing.T, o *objects) (corev1.PodTemplateSpec, int32) {
	t.Helper()
	switch {
	case len(o.deployments) == 1 && len(o.statefulSets) == 0:
		return o.deployments[0].Spec.Template, *o.deployments[0].Spec.Replicas
	case len(o.statefulSets) == 1 && len(o.deployments) == 0:
		return o.statefulSets[0].Spec.Template, *o.statefulSets[0].Spec.Replicas
	}
	t.Fatalf("%d Deployments and %d StatefulSets; want one workload", len(o.deployments), len(o.statefulSets))
	return corev1.PodTemplateSpec{}, 0
}

// checkPod asserts what every rendering's pod must have.
func checkPod(t *testing.T, p corev1.PodTemplateSpec) corev1.Container {
	t.Helper()
	spec := p.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers; want 1", len(spec.Containers))
	}
	c := spec.Containers[0]

	// Probes on the metrics port.
	for _, pr := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"liveness", c.LivenessProbe, "/healthz"}, {"readiness", c.ReadinessProbe, "/readyz"}, {"startup", c.StartupProbe, "/healthz"}} {
		if pr.probe == nil || pr.probe.HTTPGet == nil {
			t.Errorf("%s probe: %+v; want an HTTP GET of %s", pr.name, pr.probe, pr.path)
			continue
		}
		if pr.probe.HTTPGet.Path != pr.path || pr.probe.HTTPGet.Port.String() != "metrics" {
			t.Errorf("%s probe: GET %s on %s; want %s on the metrics port", pr.name, pr.probe.HTTPGet.Path, pr.probe.HTTPGet.Port.String(), pr.path)
		}
	}

	// Non-root, read-only root, no capabilities, no escalation.
	psc, sc := spec.SecurityContext, c.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Errorf("pod security context %+v; want runAsNonRoot and a non-zero runAsUser", psc)
	}
	if psc != nil && (psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault) {
		t.Errorf("pod seccomp profile %+v; want RuntimeDefault", psc.SeccompProfile)
	}
	switch {
	case sc == nil:
		t.Errorf("container has no security context")
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Errorf("readOnlyRootFilesystem %s; want true", show(sc.ReadOnlyRootFilesystem))
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Errorf("allowPrivilegeEscalation %s; want false", show(sc.AllowPrivilegeEscalation))
	case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0:
		t.Errorf("capabilities %+v; want drop ALL, add none", sc.Capabilities)
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Errorf("automountServiceAccountToken %s; want false (Oncegate calls no Kubernetes API)", show(spec.AutomountServiceAccountToken))
	}

	// The grace period outlasts the consumer's 30s drain.
	if g := spec.TerminationGracePeriodSeconds; g == nil || *g <= 30+10 {
		t.Errorf("terminationGracePeriodSeconds %s; want more than the 30s drain plus 10s", show(g))
	}

	// The image's command with the rendered configuration, never an
	// embedded NATS server.
	if !slices.Contains(c.Args, "-require-nats-url") || !slices.Contains(c.Args, "/etc/oncegate/oncegate.yaml") {
		t.Errorf("args %q; want run -require-nats-url -config /etc/oncegate/oncegate.yaml", c.Args)
	}

	// Writable places are volumes: the data directory and /tmp.
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m
	}
	for _, p := range []string{"/var/lib/oncegate", "/tmp", "/etc/oncegate/oncegate.yaml"} {
		if _, ok := mounts[p]; !ok {
			t.Errorf("nothing mounted at %s (mounts %v)", p, c.VolumeMounts)
		}
	}
	// Secrets arrive as read-only files, never as plain values.
	for _, v := range spec.Volumes {
		if v.Secret != nil {
			if m := v.Secret.DefaultMode; m == nil || *m&0o007 != 0 {
				t.Errorf("secret volume %s: mode %v; want none for others", v.Name, m)
			}
		}
	}
	for _, m := range c.VolumeMounts {
		if strings.HasPrefix(m.MountPath, "/etc/oncegate/secrets/") && !m.ReadOnly {
			t.Errorf("secret mount %s is writable", m.MountPath)
		}
	}
	for _, e := range c.Env {
		if e.Value != "" && strings.Contains(strings.ToLower(e.Name), "key") {
			t.Errorf("env %s carries a value; want it from a Secret", e.Name)
		}
	}
	return c
}

func TestKVShape(t *testing.T) {
	o := mustRender(t, []string{"values-kv.yaml"})
	p, replicas := pod(t, o)
	c := checkPod(t, p)
	if len(o.deployments) != 1 || replicas != 3 {
		t.Errorf("%d Deployments with %d replicas; want one with 3", len(o.deployments), replicas)
	}
	cfg := checkConfig(t, o.configMaps[0])
	if cfg.Ledger.Store != config.StoreKV || cfg.LLM.Cache.Store != config.StoreKV {
		t.Errorf("ledger.store %q, llm.cache.store %q; want kv and kv", cfg.Ledger.Store, cfg.LLM.Cache.Store)
	}
	if cfg.Ingress.Listen != "0.0.0.0:8080" {
		t.Errorf("ingress.listen %q; want 0.0.0.0:8080", cfg.Ingress.Listen)
	}
	for _, s := range cfg.Ingress.Sources {
		if want := "/etc/oncegate/secrets/webhooks/" + s.Name; s.SecretFile != want || s.SecretEnv != "" {
			t.Errorf("source %s: secret_file %q, secret_env %q; want the file %s", s.Name, s.SecretFile, s.SecretEnv, want)
		}
	}
	if cfg.NATS.CredsFile != "/etc/oncegate/secrets/nats/nats.creds" || cfg.Encryption.KeyFile != "/etc/oncegate/secrets/encryption/key" {
		t.Errorf("nats.creds_file %q, encryption.key_file %q; want the mounted Secrets", cfg.NATS.CredsFile, cfg.Encryption.KeyFile)
	}
	mounted := map[string]bool{}
	for _, m := range c.VolumeMounts {
		mounted[m.MountPath] = true
	}
	for _, dir := range []string{"/etc/oncegate/secrets/webhooks", "/etc/oncegate/secrets/nats", "/etc/oncegate/secrets/encryption"} {
		if !mounted[dir] {
			t.Errorf("no Secret mounted at %s", dir)
		}
	}
	if i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "OPENAI_API_KEY" }); i < 0 ||
		c.Env[i].ValueFrom == nil || c.Env[i].ValueFrom.SecretKeyRef == nil {
		t.Errorf("env %v: want OPENAI_API_KEY from a Secret", c.Env)
	}

	// The webhook Service and Ingress reach the ingress port; the metrics
	// Service every pod.
	var hooks, metrics *corev1.Service
	for i := range o.services {
		switch o.services[i].Name {
		case release + "-oncegate":
			hooks = &o.services[i]
		case release + "-oncegate-metrics":
			metrics = &o.services[i]
		}
	}
	if hooks == nil || len(hooks.Spec.Ports) != 1 || hooks.Spec.Ports[0].TargetPort.String() != "webhooks" {
		t.Errorf("webhook Service %+v; want one port to the webhooks port", hooks)
	}
	if metrics == nil || metrics.Spec.ClusterIP != "None" {
		t.Errorf("metrics Service %+v; want a headless one", metrics)
	}
	if len(o.ingresses) != 1 || o.ingresses[0].Spec.Rules[0].HTTP.Paths[0].Path != "/hooks/" {
		t.Errorf("Ingresses %+v; want one routing /hooks/ only", o.ingresses)
	}
	if len(o.pdbs) != 1 || o.pdbs[0].Spec.MaxUnavailable == nil || o.pdbs[0].Spec.MaxUnavailable.IntValue() != 1 {
		t.Errorf("PodDisruptionBudgets %+v; want one with maxUnavailable 1", o.pdbs)
	}
	if d := o.deployments[0].Spec.Strategy.RollingUpdate; d == nil || d.MaxUnavailable == nil || d.MaxUnavailable.IntValue() != 0 {
		t.Errorf("rolling update %+v; want maxUnavailable 0", d)
	}

	// Prometheus Operator: the ServiceMonitor scrapes the metrics Service
	// as job oncegate, and the PrometheusRule carries the rules file.
	if len(o.serviceMonitors) != 1 || o.serviceMonitors[0].Spec.JobLabel != "app.kubernetes.io/name" ||
		o.serviceMonitors[0].Spec.Endpoints[0].Port != "metrics" {
		t.Errorf("ServiceMonitors %+v; want one on the metrics port, job from app.kubernetes.io/name", o.serviceMonitors)
	}
	if metrics != nil && metrics.Labels["app.kubernetes.io/name"] != "oncegate" {
		t.Errorf("metrics Service labels %v; the job label would not be oncegate", metrics.Labels)
	}
	if len(o.rules) != 1 {
		t.Fatalf("%d PrometheusRules; want 1", len(o.rules))
	}
	checkRules(t, o.rules[0])
}

// checkRules compares the PrometheusRule with deploy/oncegate.rules.yml.
func checkRules(t *testing.T, got monitoringv1.PrometheusRule) {
	t.Helper()
	data, err := os.ReadFile("../oncegate.rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	var want monitoringv1.PrometheusRuleSpec
	if err := yaml.UnmarshalStrict(data, &want); err != nil {
		t.Fatalf("deploy/oncegate.rules.yml as a PrometheusRule spec: %v", err)
	}
	g, _ := yaml.Marshal(got.Spec)
	w, _ := yaml.Marshal(want)
	if !bytes.Equal(g, w) {
		t.Errorf("the PrometheusRule's spec differs from deploy/oncegate.rules.yml:\n%s\nwant\n%s", g, w)
	}
	if len(want.Groups) == 0 || len(want.Groups[0].Rules) < 10 {
		t.Errorf("deploy/oncegate.rules.yml: %d groups; want the rules", len(want.Groups))
	}
}

// TestRulesFileIsTheDeployOne: the chart carries deploy/oncegate.rules.yml
// byte for byte (a chart cannot read files outside its directory).
func TestRulesFileIsTheDeployOne(t *testing.T) {
	a, err := os.ReadFile("../oncegate.rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(chartDir, "files", "oncegate.rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Errorf("deploy/helm/oncegate/files/oncegate.rules.yml differs from deploy/oncegate.rules.yml: cp deploy/oncegate.rules.yml deploy/helm/oncegate/files/")
	}
}

func TestBadgerShape(t *testing.T) {
	o := mustRender(t, []string{"values-badger.yaml"})
	p, replicas := pod(t, o)
	c := checkPod(t, p)
	if len(o.statefulSets) != 1 || replicas != 1 {
		t.Fatalf("%d StatefulSets with %d replicas; want one with 1", len(o.statefulSets), replicas)
	}
	ss := o.statefulSets[0]
	if len(ss.Spec.VolumeClaimTemplates) != 1 || ss.Spec.VolumeClaimTemplates[0].Name != "data" {
		t.Fatalf("volume claim templates %+v; want one named data", ss.Spec.VolumeClaimTemplates)
	}
	if got := ss.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests.Storage().String(); got != "20Gi" {
		t.Errorf("volume size %s; want 20Gi (values-badger.yaml)", got)
	}
	if i := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "data" }); i < 0 || c.VolumeMounts[i].MountPath != "/var/lib/oncegate" {
		t.Errorf("the claim is not mounted on the data directory: %v", c.VolumeMounts)
	}
	if slices.ContainsFunc(p.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == "data" }) {
		t.Errorf("the pod declares a data volume beside the claim template: the ledger would not be on the claim")
	}
	if ss.Spec.ServiceName != release+"-oncegate-metrics" {
		t.Errorf("serviceName %q; want the headless metrics Service", ss.Spec.ServiceName)
	}
	cfg := checkConfig(t, o.configMaps[0])
	if cfg.Ledger.Store != config.StoreBadger || cfg.BadgerDir() != "/var/lib/oncegate/badger" {
		t.Errorf("ledger.store %q in %s; want badger on the claim", cfg.Ledger.Store, cfg.BadgerDir())
	}
}

// TestRefused: values the chart refuses to render, each with its reason.
func TestRefused(t *testing.T) {
	for _, tt := range []struct {
		name  string
		files []string
		set   []string
		want  string
	}{
		{"badger with two replicas", []string{"values-badger.yaml"}, []string{"replicas=2"}, "replicas"},
		{"badger with three replicas, from the kv file", []string{"values-kv.yaml"}, []string{"ledger.store=badger"}, "replicas"},
		{"no NATS", []string{"values-badger.yaml"}, []string{"nats.url="}, "nats.url is required"},
		{"grace period within the drain", []string{"values-kv.yaml"}, []string{"terminationGracePeriodSeconds=35"}, "terminationGracePeriodSeconds"},
		{"an unknown value", []string{"values-kv.yaml"}, []string{"replica=3"}, "replica"},
		{"an unknown ledger", []string{"values-kv.yaml"}, []string{"ledger.store=redis"}, "store"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := render(t, tt.files, tt.set...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("render(%v, %v) = %v; want an error about %s", tt.files, tt.set, err, tt.want)
			}
		})
	}
}

// TestBundledNATS: the official NATS chart is an optional dependency,
// with JetStream and three replicas by default; with it on and no
// nats.url the consumers join its service. (The chart itself is not
// vendored: this renders without it.)
func TestBundledNATS(t *testing.T) {
	c := loadChart(t)
	i := slices.IndexFunc(c.Metadata.Dependencies, func(d *chart.Dependency) bool { return d.Name == "nats" })
	if i < 0 {
		t.Fatalf("Chart.yaml: no nats dependency")
	}
	if d := c.Metadata.Dependencies[i]; d.Condition != "nats.enabled" || !strings.Contains(d.Repository, "nats-io") {
		t.Errorf("nats dependency %+v; want the official chart, condition nats.enabled", d)
	}
	nats, _ := c.Values["nats"].(map[string]any)
	if nats == nil {
		t.Fatalf("values.yaml: no nats section")
	}
	cfg := nats["config"].(map[string]any)
	js := cfg["jetstream"].(map[string]any)
	cl := cfg["cluster"].(map[string]any)
	if nats["enabled"] != false || js["enabled"] != true || cl["enabled"] != true || fmt.Sprint(cl["replicas"]) != "3" {
		t.Errorf("nats values %v; want enabled false, jetstream on, a cluster of 3", nats)
	}

	o := mustRender(t, []string{"values-badger.yaml"}, "nats.url=", "nats.enabled=true")
	if got := checkConfig(t, o.configMaps[0]).NATS.URL; got != "nats://"+release+"-nats:4222" {
		t.Errorf("nats.url %q with the bundled chart; want nats://%s-nats:4222", got, release)
	}
}

// show prints what a pointer field holds, or "unset".
func show[T any](p *T) string {
	if p == nil {
		return "unset"
	}
	return fmt.Sprint(*p)
}
