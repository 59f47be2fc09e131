package deploy_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

const chartDir = "helm/infergate"

// objects is a rendered chart, decoded: each kind's objects by name.
type objects struct {
	deployments  map[string]*appsv1.Deployment
	statefulsets map[string]*appsv1.StatefulSet
	services     map[string]*corev1.Service
	configmaps   map[string]*corev1.ConfigMap
	secrets      map[string]*corev1.Secret
	accounts     map[string]*corev1.ServiceAccount
	pdbs         map[string]*policyv1.PodDisruptionBudget
	hpas         map[string]*autoscalingv2.HorizontalPodAutoscaler
	monitors     map[string]*monitoringv1.ServiceMonitor
	rules        map[string]*monitoringv1.PrometheusRule
	kinds        []string // "Kind/name", sorted
}

// render renders the chart as helm install would (the values coalesced
// with the chart's and checked against its schema) and returns each
// manifest's text.
func render(t *testing.T, values map[string]any) (map[string]string, error) {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	caps := common.DefaultCapabilities.Copy()
	caps.KubeVersion = common.KubeVersion{Version: "v1.34.0", Major: "1", Minor: "34"}
	vals, err := util.ToRenderValues(ch, values, common.ReleaseOptions{Name: "gw", Namespace: "llm", IsInstall: true, Revision: 1}, caps)
	if err != nil {
		return nil, err
	}
	return engine.Render(ch, vals)
}

// decode decodes every manifest strictly into its Kubernetes API type: an
// unknown or misplaced field is an error, as kubectl's server-side field
// validation would make it.
func decode(t *testing.T, manifests map[string]string) (objects, error) {
	t.Helper()
	o := objects{
		deployments: map[string]*appsv1.Deployment{}, statefulsets: map[string]*appsv1.StatefulSet{},
		services: map[string]*corev1.Service{}, configmaps: map[string]*corev1.ConfigMap{},
		secrets: map[string]*corev1.Secret{}, accounts: map[string]*corev1.ServiceAccount{},
		pdbs: map[string]*policyv1.PodDisruptionBudget{}, hpas: map[string]*autoscalingv2.HorizontalPodAutoscaler{},
		monitors: map[string]*monitoringv1.ServiceMonitor{}, rules: map[string]*monitoringv1.PrometheusRule{},
	}
	names := make([]string, 0, len(manifests))
	for n := range manifests {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, file := range names {
		if strings.HasSuffix(file, "NOTES.txt") {
			continue
		}
		for _, doc := range strings.Split(manifests[file], "\n---") {
			if strings.TrimSpace(strings.TrimPrefix(doc, "---")) == "" {
				continue
			}
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
				return o, fmt.Errorf("%s: %w", file, err)
			}
			var obj interface{ GetName() string }
			switch tm.APIVersion + " " + tm.Kind {
			case "apps/v1 Deployment":
				obj = &appsv1.Deployment{}
			case "apps/v1 StatefulSet":
				obj = &appsv1.StatefulSet{}
			case "v1 Service":
				obj = &corev1.Service{}
			case "v1 ConfigMap":
				obj = &corev1.ConfigMap{}
			case "v1 Secret":
				obj = &corev1.Secret{}
			case "v1 ServiceAccount":
				obj = &corev1.ServiceAccount{}
			case "policy/v1 PodDisruptionBudget":
				obj = &policyv1.PodDisruptionBudget{}
			case "autoscaling/v2 HorizontalPodAutoscaler":
				obj = &autoscalingv2.HorizontalPodAutoscaler{}
			case "monitoring.coreos.com/v1 ServiceMonitor":
				obj = &monitoringv1.ServiceMonitor{}
			case "monitoring.coreos.com/v1 PrometheusRule":
				obj = &monitoringv1.PrometheusRule{}
			default:
				return o, fmt.Errorf("%s: %s %s is no type this test knows", file, tm.APIVersion, tm.Kind)
			}
			if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
				return o, fmt.Errorf("%s (%s): %w", file, tm.Kind, err)
			}
			n := obj.GetName()
			if n == "" {
				return o, fmt.Errorf("%s: a %s without a name", file, tm.Kind)
			}
			o.kinds = append(o.kinds, tm.Kind+"/"+n)
			switch v := obj.(type) {
			case *appsv1.Deployment:
				o.deployments[n] = v
			case *appsv1.StatefulSet:
				o.statefulsets[n] = v
			case *corev1.Service:
				o.services[n] = v
			case *corev1.ConfigMap:
				o.configmaps[n] = v
			case *corev1.Secret:
				o.secrets[n] = v
			case *corev1.ServiceAccount:
				o.accounts[n] = v
			case *policyv1.PodDisruptionBudget:
				o.pdbs[n] = v
			case *autoscalingv2.HorizontalPodAutoscaler:
				o.hpas[n] = v
			case *monitoringv1.ServiceMonitor:
				o.monitors[n] = v
			case *monitoringv1.PrometheusRule:
				o.rules[n] = v
			}
		}
	}
	sort.Strings(o.kinds)
	return o, nil
}

func mustRender(t *testing.T, values map[string]any) objects {
	t.Helper()
	m, err := render(t, values)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	o, err := decode(t, m)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	return o
}

func readValues(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// checkConfig runs the gateway's own strict loader over the config the
// chart wrote: the file the pods will read.
func checkConfig(t *testing.T, o objects, env ...string) {
	t.Helper()
	cm := o.configmaps["gw-infergate"]
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(podConfig(t, o)), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(gatewayBinary(t), "config", "check", path)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("infergate config check of the chart's config: %v\n%s\n%s", err, out, cm.Data["config.yaml"])
	}
}

// adminKeyPath is where the pod reads the admin key (server.admin_auth_file).
const adminKeyPath = "/etc/infergate/admin/admin-key"

// podConfig is the chart's config file as a process here reads it: the
// admin key the pod mounts from its Secret written to a file of the test.
func podConfig(t *testing.T, o objects) string {
	t.Helper()
	cfg := o.configmaps["gw-infergate"].Data["config.yaml"]
	sec := o.secrets["gw-infergate-admin"]
	if sec == nil || len(sec.Data["admin-key"]) == 0 {
		t.Fatalf("no admin key Secret in %v", o.kinds)
	}
	path := filepath.Join(t.TempDir(), "admin-key")
	if err := os.WriteFile(path, sec.Data["admin-key"], 0o600); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(cfg, "admin_auth_file: "+adminKeyPath) {
		t.Fatalf("the chart's config does not read the admin key from %s:\n%s", adminKeyPath, cfg)
	}
	return strings.ReplaceAll(cfg, adminKeyPath, path)
}

// TestChartDefaults renders the chart with its defaults and checks what the
// docs/deploying.md promises of the Deployment: probes on the gateway's health paths,
// a grace period that covers preStop and the drain, a non-root, read-only
// container with resources, the config mounted and reloaded in place, and
// the caps shared through the Redis the chart runs.
func TestChartDefaults(t *testing.T) {
	o := mustRender(t, nil)
	want := []string{"ConfigMap/gw-infergate", "Deployment/gw-infergate", "PodDisruptionBudget/gw-infergate",
		"Secret/gw-infergate-admin", "Service/gw-infergate", "Service/gw-infergate-redis", "ServiceAccount/gw-infergate", "StatefulSet/gw-infergate-redis"}
	if !slices.Equal(o.kinds, want) {
		t.Errorf("objects\n%v\nwant\n%v", o.kinds, want)
	}
	d := o.deployments["gw-infergate"]
	if d == nil {
		t.Fatal("no Deployment")
	}
	if *d.Spec.Replicas != 2 {
		t.Errorf("replicas %d", *d.Spec.Replicas)
	}
	ps := d.Spec.Template.Spec
	if len(ps.Containers) != 1 {
		t.Fatalf("%d containers", len(ps.Containers))
	}
	c := ps.Containers[0]
	if c.Image != "ghcr.io/infergate/infergate:0.1.0" {
		t.Errorf("image %q, want the chart's appVersion", c.Image)
	}
	if rp := c.ReadinessProbe; rp == nil || rp.HTTPGet == nil || rp.HTTPGet.Path != "/readyz" || rp.HTTPGet.Port.StrVal != "http" {
		t.Errorf("readiness probe %+v, want GET /readyz on the API port", rp)
	}
	if lp := c.LivenessProbe; lp == nil || lp.HTTPGet == nil || lp.HTTPGet.Path != "/healthz" {
		t.Errorf("liveness probe %+v, want GET /healthz", lp)
	}
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil || c.Lifecycle.PreStop.Sleep.Seconds != 5 {
		t.Errorf("preStop %+v, want a 5 s sleep", c.Lifecycle)
	}
	// preStop 5 s + drain_delay 2 s + drain_timeout 120 s + 10 s margin.
	if g := ps.TerminationGracePeriodSeconds; g == nil || *g != 137 {
		t.Errorf("terminationGracePeriodSeconds %v, want 137", g)
	}
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("container securityContext %+v", sc)
	}
	if psc := ps.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser != 65532 {
		t.Errorf("pod securityContext %+v, want non-root 65532 (the image's user)", psc)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %+v, want cpu and memory requests and a memory limit", c.Resources)
	}
	wantArgs := []string{"serve", "--config=/etc/infergate/config/config.yaml", "--watch-config=10s", "--log-format=json", "--log-level=info"}
	if !slices.Equal(c.Args, wantArgs) {
		t.Errorf("args %q\nwant %q", c.Args, wantArgs)
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	if mounts["config"] != "/etc/infergate/config" || mounts["tmp"] != "/tmp" || mounts["admin"] != "/etc/infergate/admin" {
		t.Errorf("mounts %v", mounts)
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports["http"] != 8080 || ports["admin"] != 9464 {
		t.Errorf("container ports %v", ports)
	}

	cm := o.configmaps["gw-infergate"]
	var cfg struct {
		Server  map[string]any `json:"server"`
		Shaping struct {
			Redis map[string]any `json:"redis"`
		} `json:"shaping"`
	}
	if err := yaml.Unmarshal([]byte(cm.Data["config.yaml"]), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Server["listen"] != ":8080" || cfg.Server["admin_listen"] != ":9464" || cfg.Server["drain_delay"] != "2s" || cfg.Server["drain_timeout"] != "120s" {
		t.Errorf("config server section %v", cfg.Server)
	}
	if r := cfg.Shaping.Redis; r["addr"] != "gw-infergate-redis:6379" || r["lease_ttl"] != "10s" || r["expected_replicas"] != float64(2) || r["on_failure"] != "open" {
		t.Errorf("config shaping.redis %v, want the chart's Redis with 2 replicas", r)
	}
	checkConfig(t, o)

	if svc := o.services["gw-infergate-redis"]; svc == nil || svc.Spec.Ports[0].Port != 6379 {
		t.Errorf("redis service %+v", svc)
	}
	if ss := o.statefulsets["gw-infergate-redis"]; ss == nil || !slices.Contains(ss.Spec.Template.Spec.Containers[0].Args, "--save") {
		t.Errorf("redis statefulset without --save \"\"")
	}
	pdb := o.pdbs["gw-infergate"]
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 ||
		pdb.Spec.Selector.MatchLabels["app.kubernetes.io/instance"] != "gw" {
		t.Errorf("pdb %+v", pdb.Spec)
	}
	svc := o.services["gw-infergate"]
	for k, v := range svc.Spec.Selector {
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("the Service selects %s=%s, the pods are %v", k, v, d.Spec.Template.Labels)
		}
	}
}

// leafPaths lists the dotted paths of v's leaves (an empty map or list is
// a leaf, and so is config: the gateway's own file).
func leafPaths(prefix string, v any, out *[]string) {
	m, ok := v.(map[string]any)
	if !ok || len(m) == 0 || prefix == "config" {
		*out = append(*out, prefix)
		return
	}
	for k, x := range m {
		p := k
		if prefix != "" {
			p = prefix + "." + k
		}
		leafPaths(p, x, out)
	}
}

// TestChartEveryValue renders testdata/values-all.yaml, which sets every
// value values.yaml documents (the test checks it does), and checks that
// each one arrives where it should.
func TestChartEveryValue(t *testing.T) {
	defaults, all := readValues(t, filepath.Join(chartDir, "values.yaml")), readValues(t, "testdata/values-all.yaml")
	var dp []string
	leafPaths("", defaults, &dp)
	for _, p := range dp {
		var v any = all
		for _, k := range strings.Split(p, ".") {
			m, _ := v.(map[string]any)
			v = m[k]
		}
		if v == nil {
			t.Errorf("testdata/values-all.yaml does not set %s", p)
		}
	}
	o := mustRender(t, all)
	for _, k := range []string{"HorizontalPodAutoscaler/gw-infergate", "ServiceMonitor/gw-infergate", "PrometheusRule/gw-infergate",
		"ConfigMap/gw-infergate-dashboard", "Secret/gw-infergate-auth", "Secret/gw-infergate-env"} {
		if !slices.Contains(o.kinds, k) {
			t.Errorf("no %s in %v", k, o.kinds)
		}
	}
	for _, k := range []string{"StatefulSet/gw-infergate-redis", "ServiceAccount/gw-infergate", "PodDisruptionBudget/gw-infergate"} {
		if slices.Contains(o.kinds, k) {
			t.Errorf("%s rendered though values-all turns it off", k)
		}
	}
	d := o.deployments["gw-infergate"]
	if d.Spec.Replicas != nil {
		t.Errorf("replicas %d set though the HPA owns them", *d.Spec.Replicas)
	}
	ps := d.Spec.Template.Spec
	c := ps.Containers[0]
	if c.Image != "registry.example.com/infergate@sha256:"+strings.Repeat("ab", 32) || c.ImagePullPolicy != corev1.PullAlways {
		t.Errorf("image %q %q", c.Image, c.ImagePullPolicy)
	}
	if g := *ps.TerminationGracePeriodSeconds; g != 10+3+300+10 {
		t.Errorf("grace %d, want 323", g)
	}
	if !slices.Contains(c.Args, "--auth-keys=/etc/infergate/auth/keys") || !slices.Contains(c.Args, "--max-output-tokens=1024") ||
		!slices.Contains(c.Args, "--watch-config=30s") || !slices.Contains(c.Args, "--log-level=debug") {
		t.Errorf("args %q", c.Args)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			env[e.Name] = "secret:" + e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
		}
	}
	if env["VLLM_API_KEY"] != "secret:gw-infergate-env/VLLM_API_KEY" || env["REDIS_PASSWORD"] != "secret:redis-auth/password" || env["GOMEMLIMIT"] != "900MiB" {
		t.Errorf("env %v", env)
	}
	if ps.ServiceAccountName != "infergate-sa" || ps.PriorityClassName != "llm-critical" || ps.NodeSelector["pool"] != "cpu" ||
		len(ps.Tolerations) != 1 || ps.Affinity == nil || len(ps.TopologySpreadConstraints) != 1 || len(ps.ImagePullSecrets) != 1 {
		t.Errorf("pod spec scheduling fields not carried: sa %q prio %q nodeSelector %v", ps.ServiceAccountName, ps.PriorityClassName, ps.NodeSelector)
	}
	if d.Spec.Template.Annotations["example.com/team"] != "llm" || d.Spec.Template.Labels["tier"] != "gateway" {
		t.Errorf("pod annotations %v labels %v", d.Spec.Template.Annotations, d.Spec.Template.Labels)
	}
	if c.Lifecycle.PreStop.Sleep.Seconds != 10 {
		t.Errorf("preStop %d", c.Lifecycle.PreStop.Sleep.Seconds)
	}
	hpa := o.hpas["gw-infergate"]
	if hpa.Spec.MinReplicas == nil || *hpa.Spec.MinReplicas != 3 || hpa.Spec.MaxReplicas != 12 || len(hpa.Spec.Metrics) != 2 ||
		hpa.Spec.Metrics[0].Pods == nil || hpa.Spec.Metrics[0].Pods.Metric.Name != "infergate_upstream_in_flight" ||
		hpa.Spec.Metrics[0].Pods.Target.AverageValue.Value() != 48 || *hpa.Spec.Metrics[1].Resource.Target.AverageUtilization != 60 {
		t.Errorf("hpa %+v", hpa.Spec)
	}
	sm := o.monitors["gw-infergate"]
	if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "admin" || sm.Spec.Endpoints[0].Path != "/metrics" ||
		string(sm.Spec.Endpoints[0].Interval) != "30s" || sm.Labels["release"] != "kube-prometheus" {
		t.Errorf("servicemonitor %+v", sm)
	}
	// Prometheus scrapes the admin port with the admin key, from its Secret.
	if a := sm.Spec.Endpoints[0].Authorization; a == nil || a.Type != "Bearer" || a.Credentials == nil ||
		a.Credentials.Name != "gw-infergate-admin" || a.Credentials.Key != "admin-key" {
		t.Errorf("servicemonitor authorization %+v, want Bearer from Secret gw-infergate-admin/admin-key", a)
	}
	if k := string(o.secrets["gw-infergate-admin"].Data["admin-key"]); k != "adm-values-all-key" {
		t.Errorf("admin key secret %q, want adminAuth.key's", k)
	}
	pr := o.rules["gw-infergate"]
	var file monitoringv1.PrometheusRuleSpec
	b, _ := os.ReadFile(filepath.Join(chartDir, "files/alerts.yaml"))
	if err := yaml.UnmarshalStrict(b, &file); err != nil {
		t.Fatal(err)
	}
	if len(pr.Spec.Groups) != 1 || len(pr.Spec.Groups[0].Rules) != len(file.Groups[0].Rules) || pr.Labels["release"] != "kube-prometheus" {
		t.Errorf("prometheusrule holds %d groups, want alerts.yaml's", len(pr.Spec.Groups))
	}
	for i, r := range pr.Spec.Groups[0].Rules {
		if r.Alert != file.Groups[0].Rules[i].Alert || r.Expr.String() != file.Groups[0].Rules[i].Expr.String() {
			t.Errorf("rule %d: %s %q, alerts.yaml has %s", i, r.Alert, r.Expr.String(), file.Groups[0].Rules[i].Alert)
		}
	}
	dash := o.configmaps["gw-infergate-dashboard"]
	want, _ := os.ReadFile(filepath.Join(chartDir, "files/dashboard.json"))
	if dash.Labels["grafana_dashboard"] != "1" || strings.TrimSpace(dash.Data["infergate.json"]) != strings.TrimSpace(string(want)) {
		t.Errorf("dashboard configmap: labels %v, %d bytes of %d", dash.Labels, len(dash.Data["infergate.json"]), len(want))
	}
	keys := o.secrets["gw-infergate-auth"].StringData["keys"]
	if !strings.Contains(keys, "acme sk-acme-test-key\n") || !strings.Contains(keys, "sha256:") {
		t.Errorf("keys secret %q", keys)
	}
	cm := o.configmaps["gw-infergate"]
	if !strings.Contains(cm.Data["config.yaml"], "addr: redis.shared.svc:6379") || !strings.Contains(cm.Data["config.yaml"], "password_env: REDIS_PASSWORD") ||
		!strings.Contains(cm.Data["config.yaml"], "expected_replicas: 3") || !strings.Contains(cm.Data["config.yaml"], "on_failure: closed") {
		t.Errorf("config:\n%s", cm.Data["config.yaml"])
	}
	checkConfig(t, o, "VLLM_API_KEY=sk-upstream-test", "REDIS_PASSWORD=x")
	svc := o.services["gw-infergate"]
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || svc.Spec.Ports[0].Port != 80 || svc.Spec.Ports[1].Port != 9000 || svc.Annotations["example.com/lb"] != "internal" {
		t.Errorf("service %+v", svc.Spec)
	}
}

// TestChartAdminKey: the admin port always has a key: generated when none
// is given (a new one per install, long enough), or the user's Secret,
// which the pod mounts and the ServiceMonitor scrapes with.
func TestChartAdminKey(t *testing.T) {
	a, b := mustRender(t, nil), mustRender(t, nil)
	ka, kb := a.secrets["gw-infergate-admin"].Data["admin-key"], b.secrets["gw-infergate-admin"].Data["admin-key"]
	if len(ka) < 32 || string(ka) == string(kb) {
		t.Errorf("generated admin keys %q and %q: want 32 or more characters, new per install", ka, kb)
	}
	o := mustRender(t, map[string]any{"adminAuth": map[string]any{"existingSecret": "ops-admin"}, "serviceMonitor": map[string]any{"enabled": true}})
	if _, ok := o.secrets["gw-infergate-admin"]; ok {
		t.Error("the chart wrote an admin Secret though existingSecret names one")
	}
	for _, v := range o.deployments["gw-infergate"].Spec.Template.Spec.Volumes {
		if v.Name == "admin" && (v.Secret == nil || v.Secret.SecretName != "ops-admin") {
			t.Errorf("admin volume %+v, want Secret ops-admin", v)
		}
	}
	if c := o.monitors["gw-infergate"].Spec.Endpoints[0].Authorization.Credentials; c.Name != "ops-admin" {
		t.Errorf("the ServiceMonitor reads its key from %s, want ops-admin", c.Name)
	}
}

// TestChartRefusesBadValues: a wrong type, an unknown key or values that
// contradict each other fail the render, naming the value.
func TestChartRefusesBadValues(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values string
		want   string
	}{
		{"a misspelt key", "replicas: 3", "additional properties 'replicas' not allowed"},
		{"a nested misspelt key", "drain: {timout: 10s}", "additional properties 'timout' not allowed"},
		{"a string for a number", "replicaCount: two", "/replicaCount"},
		{"not a duration", "drain: {timeout: forever}", "/drain/timeout"},
		{"an unknown failure mode", "redis: {onFailure: maybe}", "/redis/onFailure"},
		{"a bad digest", "image: {digest: latest}", "/image/digest"},
		{"a redis address without a port", "redis: {externalAddr: redis.svc}", "/redis/externalAddr"},
		{"replicas without shared caps", "redis: {enabled: false}", "redis is off and redis.externalAddr is empty"},
		{"min above max", "autoscaling: {enabled: true, minReplicas: 5, maxReplicas: 2}", "autoscaling.minReplicas (5) is above autoscaling.maxReplicas (2)"},
		{"an HPA with no metric", "autoscaling: {enabled: true, inFlightPerPod: 0, cpuUtilization: 0}", "needs autoscaling.inFlightPerPod or autoscaling.cpuUtilization"},
		{"a tenant's key as the admin key", "{auth: {keys: [acme sk-shared]}, adminAuth: {key: sk-shared}}", "adminAuth.key is one of auth.keys"},
		{"an admin key with a space", "adminAuth: {key: two words}", "/adminAuth/key"},
	} {
		var v map[string]any
		if err := yaml.Unmarshal([]byte(tc.values), &v); err != nil {
			t.Fatal(err)
		}
		_, err := render(t, v)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s (%s): %v\nwant an error with %q", tc.name, tc.values, err, tc.want)
		}
	}
}

// TestDecodeIsStrict: a field the API does not have (here a typo the
// schema cannot see, inside extraEnv) fails the decode the chart tests use.
func TestDecodeIsStrict(t *testing.T) {
	m, err := render(t, map[string]any{"extraEnv": []any{map[string]any{"name": "X", "valueFrom": map[string]any{"secretKeyRf": map[string]any{"name": "s", "key": "k"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := decode(t, m); err == nil || !strings.Contains(err.Error(), `unknown field "secretKeyRf"`) {
		t.Errorf("decode of a misspelt field: %v", err)
	}
}

// TestChartLint runs helm lint's checks (Chart.yaml, values, templates,
// schema) with the defaults and with every value set.
func TestChartLint(t *testing.T) {
	for _, vals := range []map[string]any{nil, readValues(t, "testdata/values-all.yaml")} {
		l := lint.RunAll(chartDir, vals, "llm")
		var buf bytes.Buffer
		for _, m := range l.Messages {
			if m.Severity >= support.WarningSev {
				fmt.Fprintln(&buf, m.Error())
			}
		}
		if buf.Len() > 0 {
			t.Errorf("helm lint:\n%s", buf.String())
		}
	}
}
