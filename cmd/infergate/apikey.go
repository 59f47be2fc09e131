package main

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
)

// apiKeyHeader is the Authorization header of bench and probe: the key of
// --api-key, else $OPENAI_API_KEY, for the URLs the user named and no
// other. A key never goes over plain HTTP to a host off this machine
// without --allow-plaintext-key: a key from the environment is then left
// out (with a warning: the user may not have meant it for this server),
// one given with --api-key is refused.
func apiKeyHeader(explicit string, allowPlain bool, stderr io.Writer, urls ...string) ([][2]string, error) {
	key, fromEnv := explicit, false
	if key == "" {
		key, fromEnv = os.Getenv("OPENAI_API_KEY"), true
	}
	if key == "" {
		return nil, nil
	}
	for _, raw := range urls {
		if raw == "" || allowPlain || !plaintextOffHost(raw) {
			continue
		}
		if fromEnv {
			fmt.Fprintf(stderr, "warning: $OPENAI_API_KEY is not sent over plain HTTP to %s (--allow-plaintext-key sends it)\n", raw)
			return nil, nil
		}
		return nil, fmt.Errorf("--api-key would go over plain HTTP to %s, off this machine: use https, or pass --allow-plaintext-key", raw)
	}
	return [][2]string{{"Authorization", "Bearer " + key}}, nil
}

// plaintextOffHost reports whether raw is an http:// URL of a host other
// than this machine's loopback.
func plaintextOffHost(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "http" {
		return false
	}
	h := u.Hostname()
	if h == "localhost" {
		return false
	}
	ip := net.ParseIP(h)
	return ip == nil || !ip.IsLoopback()
}
