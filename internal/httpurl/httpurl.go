// Package httpurl parses the http(s) URLs a user gives infergate (bench's
// --url, serve's --upstream and backends, rank's endpoints, diagnose's
// metrics), so that every command refuses a slip the same way and says
// what to write: "127.0.0.1:8000" is a missing scheme, not Go's "first
// path segment in URL cannot contain colon".
package httpurl

import (
	"fmt"
	"net/url"
	"strings"
)

// Parse parses raw as an http:// or https:// URL with a host. Its error
// quotes raw and, when the scheme is missing, the URL the user meant.
func Parse(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, fmt.Errorf("empty URL: want http://host:port")
	}
	if !strings.Contains(raw, "://") {
		// "localhost:8000" parses as scheme "localhost", and
		// "127.0.0.1:8000" fails on its colon: both mean http://.
		return nil, fmt.Errorf("%q has no scheme: did you mean http://%s?", raw, strings.TrimLeft(raw, "/"))
	}
	u, err := url.Parse(raw)
	if err != nil {
		if ue, ok := err.(*url.Error); ok {
			err = ue.Err // url.Error repeats raw; it is quoted once here
		}
		return nil, fmt.Errorf("%q: %w", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("%q: scheme %q, want http:// or https://", raw, u.Scheme)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("%q has no host: want %s://host:port", raw, u.Scheme)
	}
	return u, nil
}
