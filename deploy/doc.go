// Package deploy holds what runs infergate where production runs: the
// Helm chart (helm/infergate), with the Grafana dashboard and the
// Prometheus alert rules it ships (helm/infergate/files), the compose stack
// (compose), and the image builder (imagebuild; the Dockerfile sits at the
// repository's root). Its tests render the chart into the Kubernetes API
// types, run the compose stack's commands as processes and hold the
// dashboard and the rules to a real Prometheus scraping a real gateway.
//
// deploy is its own Go module (github.com/infergate/infergate/deploy), so
// Helm, the Kubernetes types, BuildKit, compose-go, go-containerregistry and
// the Prometheus operator's types are its requirements, not the gateway's.
// Its go.mod replaces the main module with the directory above: the tests
// build the gateway there, on the main module's go.mod, and import its
// internal test helpers. Its tests run inside deploy/:
//
//	cd deploy && go test ./...
package deploy
