package adminapi

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// hostile serves one fixed answer to every call and keeps the
// Authorization header it saw.
func hostile(t *testing.T, status int, body func(w http.ResponseWriter)) (*Client, *string) {
	t.Helper()
	var auth string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth = r.Header.Get("Authorization")
		w.WriteHeader(status)
		body(w)
	}))
	t.Cleanup(srv.Close)
	return &Client{URL: srv.URL, Key: "adm-key"}, &auth
}

func text(s string) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) { fmt.Fprint(w, s) }
}

func TestClientSendsTheKey(t *testing.T) {
	c, auth := hostile(t, 200, text(`{"versions":[]}`))
	if _, err := c.Versions(context.Background()); err != nil {
		t.Fatal(err)
	}
	if *auth != "Bearer adm-key" {
		t.Errorf("Authorization %q, want the key as a bearer token", *auth)
	}
	c.Key = ""
	if _, err := c.Versions(context.Background()); err != nil || *auth != "" {
		t.Errorf("without a key: %v, Authorization %q, want none sent", err, *auth)
	}
}

// A bare host:port is an http URL, as serve --admin-listen prints it.
func TestClientBareAddress(t *testing.T) {
	c, _ := hostile(t, 200, text(`{"recorded":3,"pairs":[]}`))
	c.URL = strings.TrimPrefix(c.URL, "http://") + "/"
	if p, err := c.Pairs(context.Background()); err != nil || p.Recorded != 3 {
		t.Fatalf("%+v %v", p, err)
	}
}

// A refusal is an error with the status and the gateway's own message.
func TestClientRefusalCarriesTheMessage(t *testing.T) {
	c, _ := hostile(t, http.StatusConflict, text(`{"error":{"message":"refused, the running configuration stays: no such pool","type":"invalid_request_error","code":"set_refused"}}`))
	_, err := c.Set(context.Background(), SetRequest{Settings: map[string]string{"a": "b"}})
	if err == nil || !strings.Contains(err.Error(), "409") || !strings.Contains(err.Error(), "no such pool") || !strings.Contains(err.Error(), PathSet) {
		t.Errorf("error %v, want the path, 409 and the gateway's message", err)
	}
	// A refusal without the gateway's body (a proxy in between) names
	// the status.
	c, _ = hostile(t, http.StatusBadGateway, text(`<html>bad gateway</html>`))
	if _, err := c.Stats(context.Background()); err == nil || !strings.Contains(err.Error(), "502 Bad Gateway") {
		t.Errorf("error %v, want the status", err)
	}
}

func TestClientRefusesHostileAnswers(t *testing.T) {
	for _, tc := range []struct {
		name string
		body func(http.ResponseWriter)
		want string
	}{
		{"not JSON", text(`<html>login</html>`), "not the expected JSON"},
		{"cut short", text(`{"versions":[{"version":1,`), "not the expected JSON"},
		{"wrong shape", text(`{"versions":{"version":1}}`), "not the expected JSON"},
		{"oversized", func(w http.ResponseWriter) {
			// Valid JSON all the way: only the bound stops it.
			fmt.Fprint(w, `{"versions":[],"x":"`)
			chunk := strings.Repeat("a", 1<<20)
			for range MaxAnswer>>20 + 1 {
				fmt.Fprint(w, chunk)
			}
			fmt.Fprint(w, `"}`)
		}, "larger than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := hostile(t, 200, tc.body)
			vs, err := c.Versions(context.Background())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
			if len(vs.Versions) != 0 {
				t.Errorf("versions %+v from a broken answer", vs)
			}
		})
	}
}

// The client refuses a redirect: the key never reaches another host.
func TestClientRefusesRedirect(t *testing.T) {
	var leaked string
	to := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { leaked = r.Header.Get("Authorization") }))
	defer to.Close()
	from := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, to.URL+r.URL.Path, http.StatusFound)
	}))
	defer from.Close()
	// net/http's own client follows redirects: the client guards it.
	c := &Client{URL: from.URL, Key: "adm-key", HTTP: http.DefaultClient}
	if _, err := c.Stats(context.Background()); err == nil || leaked != "" {
		t.Errorf("redirect followed: %v, key at the target %q", err, leaked)
	}
}
