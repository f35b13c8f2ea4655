package helm_test

import (
	"bytes"
	"fmt"
	"io"
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
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/cli/values"
	"helm.sh/helm/v3/pkg/getter"
	kubefake "helm.sh/helm/v3/pkg/kube/fake"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	releasepkg "helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/releaseutil"
	"helm.sh/helm/v3/pkg/storage"
	"helm.sh/helm/v3/pkg/storage/driver"
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

// valuesFiles are the documented values files; each must install, render
// and lint, and its pod start.
var valuesFiles = []string{"values-kv.yaml", "values-badger.yaml", "values-proxy.yaml"}

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
// values schema applied, and finds nothing at all.
func TestLint(t *testing.T) {
	for _, f := range valuesFiles {
		t.Run(f, func(t *testing.T) {
			l := lint.All(chartDir, mergeValues(t, []string{f}), namespace, false)
			for _, m := range l.Messages {
				if m.Severity >= support.WarningSev {
					t.Errorf("lint: %s", m)
				}
			}
		})
	}
}

// installLikeHelm installs the chart in dir as `helm install RELEASE DIR
// -f FILE --set ...` does (cmd/helm's runInstall): it loads the chart,
// refuses a chart that is not installable or whose dependencies are not
// in charts/ (action.CheckDependencies, Helm's error), merges the values,
// and runs the install (the values schema, the templates, the manifests
// sent to a cluster, the release recorded), against a fake cluster that
// takes every object.
func installLikeHelm(t *testing.T, dir string, files []string, set ...string) (*releasepkg.Release, error) {
	t.Helper()
	c, err := loader.Load(dir)
	if err != nil {
		return nil, err
	}
	if typ := c.Metadata.Type; typ != "" && typ != "application" {
		return nil, fmt.Errorf("%s charts are not installable", typ)
	}
	if req := c.Metadata.Dependencies; req != nil {
		if err := action.CheckDependencies(c, req); err != nil {
			return nil, fmt.Errorf("An error occurred while checking for chart dependencies. You may need to run `helm dependency build` to fetch missing dependencies: %w", err)
		}
	}
	o := values.Options{Values: set}
	for _, f := range files {
		o.ValueFiles = append(o.ValueFiles, filepath.Join(chartDir, f))
	}
	vals, err := o.MergeValues(getter.Providers{})
	if err != nil {
		return nil, err
	}
	cfg := &action.Configuration{
		Releases:     storage.Init(driver.NewMemory()),
		KubeClient:   &kubefake.PrintingKubeClient{Out: io.Discard},
		Capabilities: chartutil.DefaultCapabilities,
		Log:          func(string, ...any) {},
	}
	inst := action.NewInstall(cfg)
	inst.ReleaseName, inst.Namespace = release, namespace
	return inst.Run(c, vals)
}

// TestInstall: `helm install` of the chart as it is in the repository,
// with each documented values file, succeeds: no dependency is missing
// (the NATS chart is installed beside it, not as its dependency), the
// values pass the schema, the release is deployed. The chart once
// declared the NATS chart as an optional dependency without vendoring it,
// and helm install stopped at its dependency check.
func TestInstall(t *testing.T) {
	for _, f := range valuesFiles {
		t.Run(f, func(t *testing.T) {
			rel, err := installLikeHelm(t, chartDir, []string{f})
			if err != nil {
				t.Fatalf("helm install -f %s: %v", f, err)
			}
			if rel.Info.Status != releasepkg.StatusDeployed || !strings.Contains(rel.Manifest, "kind: ConfigMap") {
				t.Errorf("release %s: status %s; want deployed, with its manifests", rel.Name, rel.Info.Status)
			}
		})
	}
}

// TestInstallChecksDependencies: the install path is Helm's, dependency
// check included: the chart with a dependency that charts/ does not hold
// is refused, as helm install refuses it.
func TestInstallChecksDependencies(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "oncegate")
	if err := os.CopyFS(dir, os.DirFS(chartDir)); err != nil {
		t.Fatal(err)
	}
	meta, err := os.ReadFile(filepath.Join(dir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	meta = append(meta, "dependencies:\n  - {name: nats, version: \"1.x.x\", repository: \"https://nats-io.github.io/k8s/helm/charts/\", condition: nats.enabled}\n"...)
	if err := os.WriteFile(filepath.Join(dir, "Chart.yaml"), meta, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = installLikeHelm(t, dir, []string{"values-kv.yaml"})
	if err == nil || !strings.Contains(err.Error(), "helm dependency build") || !strings.Contains(err.Error(), "nats") {
		t.Errorf("install with a dependency missing from charts/ = %v; want Helm's refusal", err)
	}
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
		{"no model", []string{"values-badger.yaml"}, []string{"config.llm.base_url="}, "pipeline alerts needs a model"},
		{"the proxy, no model", []string{"values-proxy.yaml"}, []string{"config.llm.base_url="}, "the proxy needs a model"},
		{"the proxy, no keys", []string{"values-proxy.yaml"}, []string{"proxy.keysSecret="}, "proxy.keysSecret is required"},
		{"webhook sources, no secret", []string{"values-badger.yaml"}, []string{"secrets.webhooks="}, "secrets.webhooks is required: ingress source github"},
		{"a secretEnv without its key", []string{"values-kv.yaml"}, []string{"secretEnv.SLACK_WEBHOOK_URL.secret=s"}, "key"},
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

// TestNATSChart: the chart has no dependency; the NATS chart's values
// file it documents (nats-values.yaml) asks for what Oncegate needs of
// NATS: JetStream on a file store on a volume, and at least as many
// servers as the replicas the KV values file gives its streams and
// buckets.
func TestNATSChart(t *testing.T) {
	if deps := loadChart(t).Metadata.Dependencies; len(deps) != 0 {
		t.Errorf("Chart.yaml: dependencies %v; want none (install the NATS chart beside it)", deps)
	}
	data, err := os.ReadFile("nats-values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var nv struct {
		Config struct {
			Cluster struct {
				Enabled  bool `json:"enabled"`
				Replicas int  `json:"replicas"`
			} `json:"cluster"`
			JetStream struct {
				Enabled   bool `json:"enabled"`
				FileStore struct {
					Enabled bool   `json:"enabled"`
					Dir     string `json:"dir"`
					PVC     struct {
						Enabled bool   `json:"enabled"`
						Size    string `json:"size"`
					} `json:"pvc"`
				} `json:"fileStore"`
			} `json:"jetstream"`
		} `json:"config"`
	}
	if err := yaml.UnmarshalStrict(data, &nv); err != nil {
		t.Fatalf("nats-values.yaml: %v", err)
	}
	js, cl := nv.Config.JetStream, nv.Config.Cluster
	if !js.Enabled || !js.FileStore.Enabled || !js.FileStore.PVC.Enabled || js.FileStore.PVC.Size == "" || !cl.Enabled || cl.Replicas < 3 {
		t.Errorf("nats-values.yaml %+v; want JetStream on a file store on a volume, a cluster of 3", nv.Config)
	}
	o := mustRender(t, []string{"values-kv.yaml"})
	cfg := checkConfig(t, o.configMaps[0])
	if cfg.Ledger.KV.Replicas > cl.Replicas || cfg.Stream.Replicas > cl.Replicas {
		t.Errorf("values-kv.yaml: ledger.kv.replicas %d, stream.replicas %d; the NATS chart runs %d servers", cfg.Ledger.KV.Replicas, cfg.Stream.Replicas, cl.Replicas)
	}
}

// show prints what a pointer field holds, or "unset".
func show[T any](p *T) string {
	if p == nil {
		return "unset"
	}
	return fmt.Sprint(*p)
}

// TestDoorsAndSecrets: the values a platform engineer needs beyond the
// pipelines. Effect secrets reach the pod from existing Secrets, one
// variable each (secretEnv: secretKeyRef) or whole (envFrom); the console
// and the proxy, off by default, are container ports behind a Service
// each, with their secrets mounted as files; each HTTP door may have its
// own Ingress, on its own paths only; and the pod keeps its guards (a PDB,
// topology spread, non-root, read-only root, no capabilities, resources).
func TestDoorsAndSecrets(t *testing.T) {
	off := mustRender(t, []string{"values-kv.yaml"})
	for _, s := range off.services {
		if strings.HasSuffix(s.Name, "-console") || strings.HasSuffix(s.Name, "-proxy") {
			t.Errorf("Service %s with the console and the proxy off", s.Name)
		}
	}
	o := mustRender(t, []string{"values-kv.yaml"},
		"secretEnv.SLACK_WEBHOOK_URL.secret=oncegate-effects", "secretEnv.SLACK_WEBHOOK_URL.key=slack-webhook-url",
		"secretEnv.PAGERDUTY_ROUTING_KEY.secret=oncegate-effects", "secretEnv.PAGERDUTY_ROUTING_KEY.key=pagerduty-routing-key",
		"envFrom[0].secretRef.name=oncegate-jira",
		"console.enabled=true", "console.tokensSecret=oncegate-console", "console.kubernetesIngress.enabled=true",
		"proxy.enabled=true", "proxy.keysSecret=oncegate-proxy-keys", "proxy.kubernetesIngress.enabled=true",
		"resources.limits.cpu=2")
	p, _ := pod(t, o)
	c := checkPod(t, p)
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	for name, key := range map[string]string{"SLACK_WEBHOOK_URL": "slack-webhook-url", "PAGERDUTY_ROUTING_KEY": "pagerduty-routing-key", "OPENAI_API_KEY": "api-key"} {
		e, ok := env[name]
		if !ok || e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Key != key {
			t.Errorf("env %s = %+v; want it from the key %s of a Secret", name, e, key)
		}
	}
	if len(c.EnvFrom) != 1 || c.EnvFrom[0].SecretRef == nil || c.EnvFrom[0].SecretRef.Name != "oncegate-jira" {
		t.Errorf("envFrom %+v; want the Secret oncegate-jira", c.EnvFrom)
	}
	ports := map[string]int32{}
	for _, cp := range c.Ports {
		ports[cp.Name] = cp.ContainerPort
	}
	if ports["console"] != 9465 || ports["proxy"] != 8081 || ports["webhooks"] != 8080 || ports["metrics"] != 9464 {
		t.Errorf("container ports %v; want webhooks 8080, console 9465, proxy 8081, metrics 9464", ports)
	}
	cfg := checkConfig(t, o.configMaps[0])
	if cfg.Console.Listen != "0.0.0.0:9465" || cfg.Console.TokenFile != "/etc/oncegate/secrets/console/tokens" ||
		cfg.Proxy.Listen != "0.0.0.0:8081" || cfg.Proxy.KeysFile != "/etc/oncegate/secrets/proxy/keys" {
		t.Errorf("console %+v, proxy listen %q keys %q; want both on every interface, their secrets the mounted files", cfg.Console, cfg.Proxy.Listen, cfg.Proxy.KeysFile)
	}
	mounted := map[string]bool{}
	for _, m := range c.VolumeMounts {
		mounted[m.MountPath] = m.ReadOnly
	}
	if !mounted["/etc/oncegate/secrets/console"] || !mounted["/etc/oncegate/secrets/proxy"] {
		t.Errorf("mounts %v; want the console's tokens and the proxy's keys, read-only", c.VolumeMounts)
	}
	services := map[string]string{}
	for _, s := range o.services {
		if len(s.Spec.Ports) == 1 {
			services[s.Name] = s.Spec.Ports[0].TargetPort.String()
		}
	}
	for name, target := range map[string]string{release + "-oncegate": "webhooks", release + "-oncegate-console": "console", release + "-oncegate-proxy": "proxy", release + "-oncegate-metrics": "metrics"} {
		if services[name] != target {
			t.Errorf("Service %s targets %q; want %q (services %v)", name, services[name], target, services)
		}
	}
	paths := map[string]string{}
	for _, in := range o.ingresses {
		r := in.Spec.Rules[0].HTTP.Paths
		if len(r) != 1 {
			t.Errorf("Ingress %s: %d paths; want 1", in.Name, len(r))
			continue
		}
		paths[in.Name] = r[0].Path + " → " + r[0].Backend.Service.Name + ":" + r[0].Backend.Service.Port.Name
	}
	want := map[string]string{
		release + "-oncegate":         "/hooks/ → " + release + "-oncegate:webhooks",
		release + "-oncegate-console": "/ → " + release + "-oncegate-console:console",
		release + "-oncegate-proxy":   "/v1/ → " + release + "-oncegate-proxy:proxy",
	}
	if fmt.Sprint(paths) != fmt.Sprint(want) {
		t.Errorf("Ingresses %v; want %v", paths, want)
	}
	if len(o.pdbs) != 1 || len(p.Spec.TopologySpreadConstraints) != 1 {
		t.Errorf("%d PodDisruptionBudgets, topology spread %v; want one PDB and the values file's spread", len(o.pdbs), p.Spec.TopologySpreadConstraints)
	}
	if c.Resources.Limits.Cpu().String() != "2" || c.Resources.Requests.Memory().String() != "256Mi" {
		t.Errorf("resources %+v; want the values' limits and requests", c.Resources)
	}
}
