// Command imagebuild builds infergate's container image without a container
// engine: a static binary on an empty base (scratch) with CA certificates,
// a non-root user and a writable /tmp, written as an OCI image layout
// (--oci), a tarball `docker load` takes (--tar), or the bare file tree
// (--rootfs, which the Dockerfile's build stage uses, so both images hold the
// same files). Timestamps come from SOURCE_DATE_EPOCH or the commit, so the
// same commit and toolchain give the same image digest.
//
// It belongs to deploy's own Go module; the gateway it builds belongs to the
// main module, which deploy's go.mod replaces with the directory above it.
// The gateway is built there, on the main module's go.mod, so the image holds
// the binary `go build ./cmd/infergate` makes at the root, not one built on
// deploy's requirements.
//
//	cd deploy && go run ./imagebuild --oci ../dist/oci --tar ../dist/infergate.tar
package main

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const synopsis = `Usage: cd deploy && go run ./imagebuild [--oci DIR] [--tar FILE] [--rootfs DIR] [flags]

Builds infergate's image without a container engine: CGO_ENABLED=0 go build
of ./cmd/infergate for each platform, on scratch, with the CA bundle, a
nonroot user (65532) and /tmp. --oci writes an OCI image layout (an index
with one manifest per platform; crane, skopeo and ko read it), --tar a
tarball for 'docker load' (one platform), --rootfs the file tree alone
(the Dockerfile's build stage uses it). Run it inside deploy/, deploy's
own Go module: it builds the gateway in the main module (the directory
deploy's go.mod replaces github.com/infergate/infergate with), on that
module's go.mod. Relative paths are the working directory's.

Flags:`

// Binary is where the gateway's binary sits in the image.
const Binary = "/usr/local/bin/infergate"

// User is the image's user: distroless's nonroot, uid and gid 65532.
const User = "65532:65532"

// Ports are the ports the image exposes: the API and the admin listener
// (/metrics, /admin).
var Ports = []string{"8080/tcp", "9464/tcp"}

// Cmd is the image's default command: the gateway, listening on every
// address (a container's loopback is its own), in front of the built-in
// simulator until a config or --upstream names real backends. Its admin
// listener stays on the container's loopback: published (--admin-listen
// :9464) it needs a key of its own (--admin-auth-file), or the gateway
// refuses to start.
var Cmd = []string{"serve", "--listen", ":8080", "--admin-listen", "127.0.0.1:9464"}

// Meta is what the image says about itself.
type Meta struct {
	Version  string
	Revision string
	Created  time.Time
	Source   string
}

// Labels are the OCI annotations the image config carries.
func (m Meta) Labels() map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       "infergate",
		"org.opencontainers.image.description": "Reverse proxy and load generator for OpenAI-compatible LLM inference servers",
		"org.opencontainers.image.version":     m.Version,
		"org.opencontainers.image.revision":    m.Revision,
		"org.opencontainers.image.created":     m.Created.UTC().Format(time.RFC3339),
		"org.opencontainers.image.source":      m.Source,
	}
}

// File is one entry of the image's file tree.
type File struct {
	Path string // absolute, slash-separated
	Mode int64  // permission bits, with the sticky bit as 01000
	Dir  bool
	Data []byte
}

const passwd = "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/tmp:/sbin/nologin\n"
const group = "root:x:0:\nnonroot:x:65532:\n"

// BaseFiles are the files under the binary: users (nonroot's home is
// /tmp, the one writable directory), CA certificates, /tmp.
func BaseFiles(caBundle []byte) []File {
	return []File{
		{Path: "/etc", Mode: 0o755, Dir: true},
		{Path: "/etc/group", Mode: 0o644, Data: []byte(group)},
		{Path: "/etc/passwd", Mode: 0o644, Data: []byte(passwd)},
		{Path: "/etc/ssl", Mode: 0o755, Dir: true},
		{Path: "/etc/ssl/certs", Mode: 0o755, Dir: true},
		{Path: "/etc/ssl/certs/ca-certificates.crt", Mode: 0o644, Data: caBundle},
		{Path: "/tmp", Mode: 0o1777, Dir: true},
	}
}

// BinaryFiles is the layer that holds the gateway.
func BinaryFiles(bin []byte) []File {
	return []File{
		{Path: "/usr", Mode: 0o755, Dir: true},
		{Path: "/usr/local", Mode: 0o755, Dir: true},
		{Path: "/usr/local/bin", Mode: 0o755, Dir: true},
		{Path: Binary, Mode: 0o755, Data: bin},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "imagebuild:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("imagebuild", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintln(stderr, synopsis); fs.PrintDefaults() }
	oci := fs.String("oci", "", "write an OCI image layout to this directory")
	tarOut := fs.String("tar", "", "write a docker-load tarball to this file (one platform)")
	rootfs := fs.String("rootfs", "", "write the image's file tree to this directory")
	tag := fs.String("tag", "infergate:latest", "the tarball's image name")
	platforms := fs.String("platforms", "linux/amd64", "comma-separated OS/ARCH list, e.g. linux/amd64,linux/arm64")
	ver := fs.String("version", "", "release (default: git describe --tags --always --dirty, else dev)")
	rev := fs.String("revision", "", "source revision (default: git rev-parse HEAD)")
	created := fs.String("created", "", "creation time, RFC 3339 or Unix seconds (default: $SOURCE_DATE_EPOCH, else the commit's time)")
	source := fs.String("source", "https://github.com/infergate/infergate", "the source repository's URL (label)")
	ca := fs.String("ca-bundle", "/etc/ssl/certs/ca-certificates.crt", "the CA certificates to ship")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *oci == "" && *tarOut == "" && *rootfs == "" {
		return errors.New("name an output: --oci DIR, --tar FILE or --rootfs DIR")
	}
	plats, err := parsePlatforms(*platforms)
	if err != nil {
		return err
	}
	if (*tarOut != "" || *rootfs != "") && len(plats) != 1 {
		return fmt.Errorf("--tar and --rootfs take one platform, not %d", len(plats))
	}
	src, err := mainModuleDir(ctx)
	if err != nil {
		return err
	}
	meta, err := resolveMeta(ctx, src, *ver, *rev, *created, *source)
	if err != nil {
		return err
	}
	caBundle, err := os.ReadFile(*ca)
	if err != nil {
		return fmt.Errorf("--ca-bundle: %w", err)
	}
	tmp, err := os.MkdirTemp("", "imagebuild-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	idx := v1.ImageIndex(empty.Index)
	idx = mutate.IndexMediaType(idx, types.OCIImageIndex)
	var first v1.Image
	for _, p := range plats {
		bin, err := buildBinary(ctx, src, p, meta, filepath.Join(tmp, p.OS+"-"+p.Architecture))
		if err != nil {
			return err
		}
		if *rootfs != "" {
			if err := WriteTree(*rootfs, append(BaseFiles(caBundle), BinaryFiles(bin)...)); err != nil {
				return fmt.Errorf("--rootfs: %w", err)
			}
		}
		img, err := Image(p, meta, caBundle, bin)
		if err != nil {
			return err
		}
		if first == nil {
			first = img
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: p.OS, Architecture: p.Architecture}}})
	}
	if *oci != "" {
		if err := os.RemoveAll(*oci); err != nil {
			return err
		}
		if _, err := layout.Write(*oci, idx); err != nil {
			return fmt.Errorf("--oci: %w", err)
		}
		d, err := idx.Digest()
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "imagebuild: OCI layout %s, index %s, %s\n", *oci, d, meta.Version)
	}
	if *tarOut != "" {
		ref, err := name.NewTag(*tag)
		if err != nil {
			return fmt.Errorf("--tag: %w", err)
		}
		if err := tarball.WriteToFile(*tarOut, ref, first); err != nil {
			return fmt.Errorf("--tar: %w", err)
		}
		d, _ := first.Digest()
		fmt.Fprintf(stderr, "imagebuild: %s (%s) in %s: docker load -i %s\n", ref, d, *tarOut, *tarOut)
	}
	return nil
}

func parsePlatforms(s string) ([]v1.Platform, error) {
	var out []v1.Platform
	for _, f := range strings.Split(s, ",") {
		os, arch, ok := strings.Cut(strings.TrimSpace(f), "/")
		if !ok || os != "linux" || arch == "" {
			return nil, fmt.Errorf("--platforms: %q is not linux/ARCH", f)
		}
		out = append(out, v1.Platform{OS: os, Architecture: arch})
	}
	return out, nil
}

// mainModule is the gateway's module, which deploy's go.mod replaces with
// the directory above deploy/.
const mainModule = "github.com/infergate/infergate"

// mainModuleDir is the directory the gateway is built in: the main module's
// source, as the go command resolves it from deploy's module.
func mainModuleDir(ctx context.Context) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", mainModule)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("finding %s's source (run imagebuild inside deploy/): %w\n%s", mainModule, err, stderr.Bytes())
	}
	dir := strings.TrimSpace(string(out))
	if _, err := os.Stat(filepath.Join(dir, "cmd", "infergate")); err != nil {
		return "", fmt.Errorf("%s resolves to %q, which holds no cmd/infergate (run imagebuild inside deploy/ of a checkout): %w", mainModule, dir, err)
	}
	return dir, nil
}

// resolveMeta fills what the flags left empty from git (in the source tree
// src) and SOURCE_DATE_EPOCH.
func resolveMeta(ctx context.Context, src, ver, rev, created, source string) (Meta, error) {
	m := Meta{Version: ver, Revision: rev, Source: source}
	git := func(args ...string) string {
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Dir = src
		out, err := cmd.Output()
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(out))
	}
	if m.Version == "" {
		m.Version = git("describe", "--tags", "--always", "--dirty")
	}
	if m.Version == "" {
		m.Version = "dev"
	}
	if m.Revision == "" {
		m.Revision = git("rev-parse", "HEAD")
	}
	if m.Revision == "" {
		m.Revision = "unknown"
	}
	if created == "" {
		created = os.Getenv("SOURCE_DATE_EPOCH")
	}
	if created == "" {
		created = git("log", "-1", "--format=%ct")
	}
	switch {
	case created == "":
		m.Created = time.Unix(0, 0).UTC()
	default:
		if n, err := strconv.ParseInt(created, 10, 64); err == nil {
			m.Created = time.Unix(n, 0).UTC()
			break
		}
		t, err := time.Parse(time.RFC3339, created)
		if err != nil {
			return m, fmt.Errorf("--created: %q is neither Unix seconds nor RFC 3339", created)
		}
		m.Created = t.UTC()
	}
	return m, nil
}

// buildBinary compiles ./cmd/infergate of the main module in src for p,
// static and path-free, with the release stamped in. GOWORK=off: the
// main module's go.mod alone picks the versions, whatever go.work a
// checkout may hold.
func buildBinary(ctx context.Context, src string, p v1.Platform, m Meta, out string) ([]byte, error) {
	ldflags := fmt.Sprintf("-s -w -X main.version=%s -X main.revisionFlag=%s -X main.committed=%s",
		m.Version, m.Revision, m.Created.Format(time.RFC3339))
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false", "-ldflags", ldflags, "-o", out, "./cmd/infergate")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture, "GOWORK=off")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go build for %s/%s: %w\n%s", p.OS, p.Architecture, err, stderr.Bytes())
	}
	return os.ReadFile(out)
}

// Image assembles one platform's image: the base layer, the binary's
// layer, and the config.
func Image(p v1.Platform, m Meta, caBundle, bin []byte) (v1.Image, error) {
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	for _, files := range [][]File{BaseFiles(caBundle), BinaryFiles(bin)} {
		data, err := Tar(files, m.Created)
		if err != nil {
			return nil, err
		}
		// Compressed once and kept: without the cache every digest, OCI
		// layout and tarball write gzips the layer again (four times a
		// build with --oci and --tar, for a 30 MB binary).
		layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(data)), nil
		}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
		if err != nil {
			return nil, err
		}
		img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{
			Created: v1.Time{Time: m.Created}, CreatedBy: "deploy/imagebuild", Comment: files[len(files)-1].Path,
		}})
		if err != nil {
			return nil, err
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = p.OS, p.Architecture
	cf.Created = v1.Time{Time: m.Created}
	cf.Author = "infergate"
	ports := map[string]struct{}{}
	for _, port := range Ports {
		ports[port] = struct{}{}
	}
	cf.Config = v1.Config{
		User:         User,
		Entrypoint:   []string{Binary},
		Cmd:          slices.Clone(Cmd),
		Env:          []string{"PATH=/usr/local/bin", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"},
		WorkingDir:   "/",
		ExposedPorts: ports,
		Labels:       m.Labels(),
		StopSignal:   "SIGTERM",
	}
	return mutate.ConfigFile(img, cf)
}

// Tar writes files as one layer: root-owned, every time the same, so the
// layer's digest depends on the files alone.
func Tar(files []File, mtime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: strings.TrimPrefix(f.Path, "/"), Mode: f.Mode, ModTime: mtime, Format: tar.FormatPAX, Uname: "root", Gname: "root"}
		if f.Dir {
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.Data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// WriteTree writes files under dir, as the image's layers would unpack.
func WriteTree(dir string, files []File) error {
	for _, f := range files {
		p := filepath.Join(dir, filepath.FromSlash(f.Path))
		perm := os.FileMode(f.Mode & 0o777)
		if f.Mode&0o1000 != 0 {
			perm |= os.ModeSticky
		}
		if f.Dir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
		} else if err := os.WriteFile(p, f.Data, perm); err != nil {
			return err
		}
		if err := os.Chmod(p, perm); err != nil {
			return err
		}
	}
	return nil
}
