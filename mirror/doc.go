// Package mirror is the gateway's half of judging a candidate backend on
// live traffic: rules that pick requests and copy them to a candidate
// pool (shadow) or send a share to it instead (a canary split), the pairs
// of answers that result, their quality signals (package quality), and
// the recorder that writes them to a rotating JSONL file and keeps the
// recent ones for /admin/pairs. The A/B report that judges the pairs is
// package mirror/ab, which the gateway does not link.
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
// recorder.
package mirror
