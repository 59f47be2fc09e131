package archtest

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

const mod = "github.com/infergate/infergate/"

// httpLibs are the HTTP libraries a package that "knows no HTTP library"
// must not use: neither it nor any package of this module it reaches
// imports one. A third-party library's own imports are its business
// (tiktoken-go, under internal/tokens, imports net/http for a loader the
// project never calls).
var httpLibs = []string{"net/http", "github.com/valyala/fasthttp"}

// leafForbidden is what the leaves the gateway shares with diagnose
// (internal/promtext, internal/engine) must not reach.
var leafForbidden = []string{mod + "diagnose", mod + "bench", mod + "verdict", mod + "proxy", mod + "tracing"}

// rules are DESIGN.md's arrows: each package (and what it imports, all
// the way down) must not reach any of the forbidden ones.
var rules = []struct {
	pkg, why  string
	forbidden []string
}{
	{"bench", "a load generator carries no gateway and no OpenTelemetry SDK", []string{mod + "proxy", mod + "tracing", "go.opentelemetry.io/otel/sdk", mod + "mirror"}},
	{"shaping", "admission knows no HTTP library", httpLibs},
	{"policy", "the policy knows no HTTP library", httpLibs},
	{"verdict", "statistics and the rule: no HTTP, no HTML", append([]string{mod + "internal/svgchart", "html", "html/template"}, httpLibs...)},
	{"diagnose", "the classifier knows no HTTP library (scraping is diagnose/collect's)", httpLibs},
	{"quality", "the judge of an answer knows no HTTP library", httpLibs},
	{"affinity", "the prefix index knows no HTTP library and no gateway", append([]string{mod + "proxy", mod + "tracing"}, httpLibs...)},
	{"openai", "the wire format depends on no HTTP library and nothing of ours", append([]string{mod + "proxy", mod + "bench", mod + "tracing", mod + "mirror"}, httpLibs...)},
	{"sim", "the simulator uses the wire format only", []string{mod + "proxy", mod + "bench", mod + "tracing", mod + "mirror", mod + "shaping", mod + "policy"}},
	{"proxy", "the gateway links only the gateway: no load generator, statistics, diagnosis or report pages", []string{mod + "bench", mod + "verdict", mod + "diagnose", mod + "internal/svgchart", mod + "mirror/ab", "github.com/HdrHistogram", "github.com/schollz/progressbar"}},
	{"mirror", "the mirror's recorder is used by the gateway, never the reverse, and reports nothing (its report is mirror/ab)", []string{mod + "proxy", mod + "tracing", mod + "bench", mod + "verdict", mod + "internal/svgchart"}},
	{"tracing", "the timeline does not know the gateway", []string{mod + "proxy", mod + "bench", mod + "mirror"}},
	{"internal/promtext", "the exposition parser is a leaf the gateway links", append(leafForbidden, httpLibs...)},
	{"internal/engine", "what servers' metrics mean is a leaf the gateway links (callers fetch)", append(leafForbidden, httpLibs...)},
	{"internal/adminapi", "the admin API's bodies and client are for any caller: no gateway, no fasthttp, no OpenTelemetry SDK", []string{mod + "proxy", mod + "tracing", mod + "mirror", mod + "bench", "go.opentelemetry.io/otel/sdk", "github.com/valyala/fasthttp"}},
	{"tune", "the tuning loop drives a gateway through its admin API, as a user would, never from inside", []string{mod + "proxy", mod + "tracing", mod + "mirror", "go.opentelemetry.io/otel/sdk"}},
}

func goTool(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// list runs go list with args in the module's root and returns its lines.
func list(t *testing.T, args ...string) []string {
	t.Helper()
	cmd := exec.Command(goTool(t), append([]string{"list"}, args...)...)
	cmd.Dir = "../.."
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list %v: %v\n%s", args, err, out)
	}
	return strings.Fields(string(out))
}

// violations returns, for each forbidden package deps reaches, the
// package that imports it directly, so a failure says where to look.
func violations(deps []string, forbidden []string) []string {
	var out []string
	for _, d := range deps {
		for _, f := range forbidden {
			if d == f || strings.HasPrefix(d, f+"/") {
				out = append(out, d)
			}
		}
	}
	return out
}

func TestDependencyRules(t *testing.T) {
	for _, r := range rules {
		t.Run(r.pkg, func(t *testing.T) {
			var ours, http []string
			for _, f := range r.forbidden {
				if slices.Contains(httpLibs, f) {
					http = append(http, f)
				} else {
					ours = append(ours, f)
				}
			}
			deps := list(t, "-deps", "./"+r.pkg)
			if bad := violations(deps, ours); len(bad) > 0 {
				t.Errorf("%s reaches %v (%s); go list -deps ./%s shows the path", r.pkg, bad, r.why, r.pkg)
			}
			if len(http) == 0 {
				return
			}
			for _, l := range list(t, "-deps", "-f", "{{.ImportPath}}:{{join .Imports \",\"}}", "./"+r.pkg) {
				pkg, imports, _ := strings.Cut(l, ":")
				if !strings.HasPrefix(pkg, mod) {
					continue
				}
				if bad := violations(strings.Split(imports, ","), http); len(bad) > 0 {
					t.Errorf("%s reaches %s, which imports %v (%s)", r.pkg, pkg, bad, r.why)
				}
			}
		})
	}
}

// TestNothingImportsCmd: cmd wires everything and nothing imports it.
func TestNothingImportsCmd(t *testing.T) {
	lines := list(t, "-f", "{{.ImportPath}}:{{join .Imports \",\"}}", "./...")
	for _, l := range lines {
		pkg, imports, _ := strings.Cut(l, ":")
		for imp := range strings.SplitSeq(imports, ",") {
			if strings.HasPrefix(imp, mod+"cmd") {
				t.Errorf("%s imports %s: nothing imports cmd", pkg, imp)
			}
		}
	}
}

// TestRulesCatchAViolation: the check itself finds a forbidden package
// among the dependencies (so a rule above cannot pass by never looking).
func TestRulesCatchAViolation(t *testing.T) {
	deps := list(t, "-deps", "./proxy")
	if !slices.Contains(deps, mod+"tracing") {
		t.Fatal("proxy does not reach tracing: the listing is wrong")
	}
	if bad := violations(deps, []string{mod + "tracing"}); len(bad) == 0 {
		t.Error("a package that reaches tracing was not flagged")
	}
}
