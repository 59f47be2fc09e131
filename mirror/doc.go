// Package mirror judges a candidate backend on live traffic: rules that
// pick requests and copy them to a candidate pool (shadow) or send a
// share to it instead (a canary split), the pairs of answers that result,
// their quality signals (package quality), the recorder that writes them
// to a rotating JSONL file and keeps the recent ones for /admin/pairs,
// and the A/B report that ab report prints: each arm's figures, the
// paired differences and the verdict (package verdict's rule), as text,
// JSON or one HTML page, with a judge model's blind grading when asked.
//
// The gateway (package proxy) owns only the tap and the candidate's
// round trip: after admission it asks the live rules whether a request is
// taken, starts a Flight, and hands each arm's answer to it. Everything
// else here runs off the primary's goroutine: the copy's body is made on
// the arm's goroutine, and the request is parsed (what it asked, its
// prompt) and the answers judged on the recorder's.
//
// Files: config.go the mirror: section; rule.go rules made live (match,
// sample, copy, split); pair.go a pair and its record; recorder.go the
// recorder; report.go and split.go the A/B report of mirrored and split
// traffic; html.go its page; pairfile.go reading pairs back; judge.go the
// judge model's client.
package mirror
