// Package deploy holds what runs infergate where production runs: the
// Helm chart (helm/infergate), with the Grafana dashboard and the
// Prometheus alert rules it ships (helm/infergate/files), the compose stack
// (compose), and the image builder (imagebuild; the Dockerfile sits at the
// module's root). Its tests render the chart into the Kubernetes API types,
// run the compose stack's commands as processes and hold the dashboard and
// the rules to a real Prometheus scraping a real gateway.
package deploy
