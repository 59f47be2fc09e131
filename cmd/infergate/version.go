package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// version is the release this binary was built as. Builds from a tag set
// it with -ldflags "-X main.version=v1.2.3" (deploy/imagebuild does, from
// git describe); otherwise it is the module version Go stamped, or "dev".
var version = ""

// revisionFlag and committed are the source commit and its time, set with -X
// by builds that know them when Go's own VCS stamp is off (-buildvcs=false,
// or a tree without git).
var revisionFlag, committed = "", ""

const versionSynopsis = `version

Prints the release, the source revision and time it was built from, and the
Go toolchain, one per line.`

// buildVersion returns the release and, when Go stamped them, the VCS
// revision (with "+dirty" for a modified tree) and its commit time.
func buildVersion() (release, revision, built string) {
	stampedRevision := revisionFlag
	release = version
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		if release == "" {
			release = "dev"
		}
		return release, orUnknown(revisionFlag), orUnknown(committed)
	}
	if release == "" {
		release = bi.Main.Version
		if release == "" || release == "(devel)" {
			release = "dev"
		}
	}
	revision, built = "unknown", "unknown"
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.time":
			built = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if dirty && revision != "unknown" {
		revision += "+dirty"
	}
	if revision == "unknown" && stampedRevision != "" {
		revision = stampedRevision
	}
	if built == "unknown" && committed != "" {
		built = committed
	}
	return release, revision, built
}

func runVersion(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", versionSynopsis, stderr)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	release, revision, built := buildVersion()
	fmt.Fprintf(stdout, "infergate %s\nrevision %s\ncommitted %s\n%s %s/%s\n", release, revision, built, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return nil
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
