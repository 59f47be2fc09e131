package main

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
)

// build runs imagebuild as a user would, inside deploy's module (here from
// deploy/imagebuild): it finds the main module's source itself.
func build(t *testing.T, args ...string) {
	t.Helper()
	var stderr bytes.Buffer
	if err := run(context.Background(), args, &stderr); err != nil {
		t.Fatalf("imagebuild %v: %v\n%s", args, err, stderr.Bytes())
	}
}

// entry is a file of the image as a test compares it.
type entry struct {
	mode     fs.FileMode
	uid, gid int
	size     int64
}

// files reads a layer stream's entries.
func files(t *testing.T, r io.Reader, keep map[string][]byte) map[string]entry {
	t.Helper()
	out := map[string]entry{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		p := "/" + strings.TrimSuffix(h.Name, "/")
		out[p] = entry{mode: h.FileInfo().Mode(), uid: h.Uid, gid: h.Gid, size: h.Size}
		if _, ok := keep[p]; ok {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			keep[p] = b
		}
	}
}

// logs is a process's output, written by exec's copier while the test
// reads it.
type logs struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logs) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(b)
}

func (l *logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// bound waits for the line in which the gateway names an address it bound
// (logged as msg, in text or JSON) and returns the address.
func (l *logs) bound(t *testing.T, msg string) string {
	t.Helper()
	re := regexp.MustCompile(`(?:msg="` + msg + `"|"msg":"` + msg + `")[^\n]*?\baddr"?[=:]"?([^\s",]+)`)
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if m := re.FindStringSubmatch(l.String()); m != nil {
			return m[1]
		}
	}
	t.Fatalf("the gateway never logged %q:\n%s", msg, l.String())
	return ""
}

// TestImage builds the image with no container engine, twice, and checks
// what a platform team checks before running it: the same digest from the
// same commit, a non-root user, the entrypoint and ports, the labels, only
// the files it should hold, and a binary that runs as its default command.
func TestImage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	dir := t.TempDir()
	oci1, oci2, tarPath := filepath.Join(dir, "oci1"), filepath.Join(dir, "oci2"), filepath.Join(dir, "image.tar")
	meta := []string{"--version", "v9.8.7-test", "--revision", "0123456789abcdef", "--created", "1765000000"}
	build(t, append([]string{"--oci", oci1, "--tar", tarPath, "--tag", "infergate:v9.8.7-test"}, meta...)...)
	build(t, append([]string{"--oci", oci2}, meta...)...)

	idx1, err := layout.ImageIndexFromPath(oci1)
	if err != nil {
		t.Fatal(err)
	}
	idx2, err := layout.ImageIndexFromPath(oci2)
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := idx1.Digest()
	d2, _ := idx2.Digest()
	if d1 != d2 {
		t.Errorf("two builds of one commit: index %s and %s, want one digest", d1, d2)
	}
	im, err := idx1.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].Platform == nil || im.Manifests[0].Platform.Architecture != "amd64" || im.Manifests[0].Platform.OS != "linux" {
		t.Fatalf("index manifests %+v, want one linux/amd64", im.Manifests)
	}
	img, err := idx1.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	// The tarball holds the same image, for docker load.
	timg, err := tarball.ImageFromPath(tarPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	// (docker's manifest differs in media types; config and layers agree.)
	if a, b := configName(t, img), configName(t, timg); a != b {
		t.Errorf("the tarball's config is %s, the OCI layout's %s", b, a)
	}

	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if c.User != "65532:65532" {
		t.Errorf("user %q, want the non-root 65532:65532", c.User)
	}
	if !slices.Equal(c.Entrypoint, []string{"/usr/local/bin/infergate"}) {
		t.Errorf("entrypoint %q", c.Entrypoint)
	}
	if !slices.Equal(c.Cmd, []string{"serve", "--listen", ":8080", "--admin-listen", "127.0.0.1:9464"}) {
		t.Errorf("cmd %q", c.Cmd)
	}
	var ports []string
	for p := range c.ExposedPorts {
		ports = append(ports, p)
	}
	sort.Strings(ports)
	if !slices.Equal(ports, []string{"8080/tcp", "9464/tcp"}) {
		t.Errorf("exposed ports %v, want the API's 8080 and the admin's 9464", ports)
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.version":  "v9.8.7-test",
		"org.opencontainers.image.revision": "0123456789abcdef",
		"org.opencontainers.image.source":   "https://github.com/infergate/infergate",
		"org.opencontainers.image.created":  "2025-12-06T05:46:40Z",
	} {
		if c.Labels[k] != want {
			t.Errorf("label %s = %q, want %q", k, c.Labels[k], want)
		}
	}
	if cf.OS != "linux" || cf.Architecture != "amd64" || !cf.Created.Equal(time.Unix(1765000000, 0)) {
		t.Errorf("config os/arch/created %s/%s/%v", cf.OS, cf.Architecture, cf.Created)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 2 {
		t.Errorf("%d layers, want the base and the binary's", len(layers))
	}

	// The files, flattened as a runtime unpacks them.
	keep := map[string][]byte{"/usr/local/bin/infergate": nil, "/etc/passwd": nil}
	rc := mutate.Extract(img)
	got := files(t, rc, keep)
	rc.Close()
	var paths []string
	for p, e := range got {
		paths = append(paths, p)
		if e.uid != 0 || e.gid != 0 {
			t.Errorf("%s owned by %d:%d, want root (read-only to the user)", p, e.uid, e.gid)
		}
	}
	sort.Strings(paths)
	want := []string{"/etc", "/etc/group", "/etc/passwd", "/etc/ssl", "/etc/ssl/certs", "/etc/ssl/certs/ca-certificates.crt",
		"/tmp", "/usr", "/usr/local", "/usr/local/bin", "/usr/local/bin/infergate"}
	if !slices.Equal(paths, want) {
		t.Errorf("image files\n%v\nwant\n%v", paths, want)
	}
	if m := got["/tmp"].mode; m&fs.ModeSticky == 0 || m.Perm() != 0o777 {
		t.Errorf("/tmp mode %v, want drwxrwxrwt", m)
	}
	if m := got["/usr/local/bin/infergate"].mode; m.Perm() != 0o755 {
		t.Errorf("binary mode %v", m)
	}
	if got["/etc/ssl/certs/ca-certificates.crt"].size < 1000 {
		t.Errorf("CA bundle of %d bytes", got["/etc/ssl/certs/ca-certificates.crt"].size)
	}
	if !strings.Contains(string(keep["/etc/passwd"]), "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd has no nonroot user:\n%s", keep["/etc/passwd"])
	}

	// The binary from the layer: static, and it runs.
	bin := filepath.Join(dir, "infergate")
	if err := os.WriteFile(bin, keep["/usr/local/bin/infergate"], 0o755); err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skip("the image's binary is linux/amd64")
	}
	out, err := exec.Command("ldd", bin).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "not a dynamic executable") {
		t.Errorf("ldd says the binary is dynamic:\n%s", out)
	}
	out, err = exec.Command(bin, "version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "infergate v9.8.7-test\nrevision 0123456789abcdef\ncommitted 2025-12-06T05:46:40Z\n") {
		t.Errorf("version: %v\n%s", err, out)
	}
	runDefaultCmd(t, bin, c)
}

// configName is the image's config digest followed by its layers' diff IDs.
func configName(t *testing.T, img v1.Image) string {
	t.Helper()
	d, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprint(d, cf.RootFS.DiffIDs)
}

// runDefaultCmd starts the image's own command (its ports moved to
// loopback ones the kernel picks) and asks it for a completion: with no config it serves the
// built-in simulator.
func runDefaultCmd(t *testing.T, bin string, c v1.Config) {
	args := slices.Clone(c.Cmd)
	for i := range args {
		switch args[i] {
		case ":8080", "127.0.0.1:9464":
			args[i] = "127.0.0.1:0"
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = t.TempDir()
	cmd.Env = append(slices.Clone(c.Env), "HOME=/tmp")
	var out logs
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
		if t.Failed() {
			t.Logf("gateway log:\n%s", out.String())
		}
	}()
	api, admin := out.bound(t, "infergate listening"), out.bound(t, "admin listening")
	ready := false
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get("http://" + api + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				ready = true
				break
			}
		}
	}
	if !ready {
		t.Fatal("the image's command never answered /readyz 200")
	}
	body := `{"model":"sim-model","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`
	resp, err := http.Post("http://"+api+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"choices"`) {
		t.Errorf("completion: %d %s", resp.StatusCode, b)
	}
	resp, err = http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), "infergate_requests_total") {
		t.Errorf("admin /metrics without infergate_requests_total:\n%.400s", b)
	}
}

// TestRootfsIsTheImage: the tree --rootfs writes (what the Dockerfile's
// final stage copies) holds the image's files with the image's modes.
func TestRootfsIsTheImage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	root := filepath.Join(t.TempDir(), "rootfs")
	build(t, "--rootfs", root, "--version", "v1", "--revision", "r", "--created", "0")
	var got []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		got = append(got, fmt.Sprintf("%s %v", strings.TrimPrefix(p, root), info.Mode()))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, f := range append(BaseFiles(nil), BinaryFiles(nil)...) {
		m := fs.FileMode(f.Mode & 0o777)
		if f.Mode&0o1000 != 0 {
			m |= fs.ModeSticky
		}
		if f.Dir {
			m |= fs.ModeDir
		}
		want = append(want, fmt.Sprintf("%s %v", f.Path, m))
	}
	sort.Strings(got)
	sort.Strings(want)
	if !slices.Equal(got, want) {
		t.Errorf("rootfs\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestDockerfileMatchesImagebuild reads the Dockerfile with BuildKit's own
// parser: its build stage writes imagebuild's tree, its final stage starts
// from scratch, copies that tree whole and sets the config imagebuild sets.
func TestDockerfileMatchesImagebuild(t *testing.T) {
	f, err := os.Open("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, err := parser.Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	var stages [][]*parser.Node
	for _, n := range res.AST.Children {
		n.Value = strings.ToLower(n.Value)
		if n.Value == "from" {
			stages = append(stages, nil)
		}
		if len(stages) > 0 {
			stages[len(stages)-1] = append(stages[len(stages)-1], n)
		}
	}
	if len(stages) != 2 {
		t.Fatalf("%d stages, want build and final", len(stages))
	}
	args := func(n *parser.Node) []string {
		var out []string
		for a := n.Next; a != nil; a = a.Next {
			out = append(out, a.Value)
		}
		return out
	}
	// The build stage's Go is the one both modules name: the main module's
	// (the gateway) and deploy's (imagebuild).
	for _, path := range []string{"../../go.mod", "../go.mod"} {
		gomod, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		goLine := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(gomod)
		if from := args(stages[0][0]); len(goLine) < 2 || len(from) == 0 || !strings.HasPrefix(from[0], "golang:"+string(goLine[1])) {
			t.Errorf("the build stage is FROM %v; %s wants Go %s", from, path, goLine[1:])
		}
	}
	built := false
	for _, n := range stages[0] {
		if n.Value == "run" && strings.Contains(strings.Join(args(n), " "), "cd deploy && go run ./imagebuild --rootfs /rootfs") {
			built = true
		}
	}
	if !built {
		t.Error("the build stage does not run imagebuild --rootfs /rootfs")
	}
	m := Meta{Version: "${VERSION}", Revision: "${REVISION}", Source: "https://github.com/infergate/infergate"}
	wantLabels := m.Labels()
	delete(wantLabels, "org.opencontainers.image.created") // docker build stamps its own
	gotLabels := map[string]string{}
	var exposed []string
	final := map[string][]string{}
	for _, n := range stages[1] {
		a := args(n)
		switch n.Value {
		case "label":
			for i := 0; i+1 < len(a); i += 3 { // key, value, "="
				gotLabels[a[i]] = strings.Trim(a[i+1], `"`)
			}
		case "expose":
			exposed = append(exposed, a...)
		case "env":
			for i := 0; i+1 < len(a); i += 3 {
				final["env"] = append(final["env"], a[i]+"="+a[i+1])
			}
		default:
			final[n.Value] = a
		}
	}
	if got := final["from"]; !slices.Equal(got, []string{"scratch"}) {
		t.Errorf("final stage FROM %v, want scratch", got)
	}
	if got := final["copy"]; !slices.Equal(got, []string{"/rootfs/", "/"}) || !hasCopyFrom(stages[1]) {
		t.Errorf("final stage COPY %v, want --from=build /rootfs/ /", got)
	}
	checks := map[string][]string{
		"user":       {User},
		"entrypoint": {Binary},
		"cmd":        Cmd,
		"workdir":    {"/"},
		"stopsignal": {"SIGTERM"},
		"env":        {"PATH=/usr/local/bin", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"},
	}
	for k, want := range checks {
		if got := final[k]; !slices.Equal(got, want) {
			t.Errorf("Dockerfile %s %q, imagebuild %q", strings.ToUpper(k), got, want)
		}
	}
	if !slices.Equal(exposed, Ports) {
		t.Errorf("Dockerfile EXPOSE %v, imagebuild %v", exposed, Ports)
	}
	for k, v := range wantLabels {
		if gotLabels[k] != v {
			t.Errorf("Dockerfile LABEL %s=%q, imagebuild %q", k, gotLabels[k], v)
		}
	}
	for k := range gotLabels {
		if _, ok := wantLabels[k]; !ok {
			t.Errorf("Dockerfile LABEL %s: imagebuild sets no such label", k)
		}
	}
}

func hasCopyFrom(stage []*parser.Node) bool {
	for _, n := range stage {
		if n.Value == "copy" && slices.Contains(n.Flags, "--from=build") {
			return true
		}
	}
	return false
}

// TestBadFlags: a wrong platform or a missing output is refused by name.
func TestBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "name an output"},
		{[]string{"--oci", t.TempDir(), "--platforms", "darwin/arm64"}, `"darwin/arm64" is not linux/ARCH`},
		{[]string{"--tar", "x.tar", "--platforms", "linux/amd64,linux/arm64"}, "one platform, not 2"},
		{[]string{"--oci", t.TempDir(), "--created", "yesterday"}, "--created"},
	} {
		err := run(context.Background(), tc.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("imagebuild %v: %v, want %q", tc.args, err, tc.want)
		}
	}
}
