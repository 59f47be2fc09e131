// Package ab is the A/B report that `infergate ab report` prints, from the
// pairs the gateway's mirror recorded (a pairs file, or a running
// gateway's /admin/pairs): each arm's figures, the paired differences of
// mirrored traffic or the independent samples of a canary split, and the
// verdict by package verdict's rule, as text, JSON or one HTML page, with
// a judge model's blind grading when asked. It is offline: the gateway
// records pairs (package mirror) and never links this package.
//
// Files: report.go the paired report and its text; split.go a canary's
// two arms; slo.go the figures judged at SLOs; html.go the page;
// pairfile.go reading pairs back; judge.go the judge model's client and
// judged.go its tally.
package ab
