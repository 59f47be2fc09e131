package safehttp_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/infergate/infergate/internal/adminapi"
	"github.com/infergate/infergate/internal/safehttp"
	"github.com/infergate/infergate/mirror"
	"github.com/infergate/infergate/mirror/ab"
)

// redirector is a server that sends every request on to another port of
// the same host, which records the credentials that reach it.
type redirector struct {
	from, to *httptest.Server
	mu       sync.Mutex
	got      []string
}

func newRedirector(t *testing.T) *redirector {
	r := &redirector{}
	r.to = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.got = append(r.got, req.Header.Get("Authorization"))
		r.mu.Unlock()
		w.Write([]byte(`{}`))
	}))
	r.from = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		http.Redirect(w, req, r.to.URL+req.URL.Path, http.StatusTemporaryRedirect)
	}))
	t.Cleanup(func() { r.from.Close(); r.to.Close() })
	return r
}

func (r *redirector) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.got...)
}

// TestNoCredentialFollowsARedirect: net/http would send the key on to
// another port of the same host; the judge, the admin client and the
// plain client refuse the hop instead, and a request without a key still
// follows it.
func TestNoCredentialFollowsARedirect(t *testing.T) {
	r := newRedirector(t)
	ctx := context.Background()

	req, _ := http.NewRequest("GET", r.from.URL+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer sk-redirect-me")
	if _, err := safehttp.Client(0).Do(req); !errors.Is(err, safehttp.ErrRedirect) {
		t.Errorf("a request with a key: %v, want ErrRedirect", err)
	}
	// What the policy is for: net/http alone would have sent the key on.
	req, _ = http.NewRequest("GET", r.from.URL+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer sk-control")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
	if got := r.seen(); len(got) != 1 || got[0] != "Bearer sk-control" {
		t.Fatalf("the control: net/http's own client carried %q over the redirect", got)
	}

	j := &ab.Judge{URL: r.from.URL, Model: "judge", Key: "sk-judge-key"}
	pair := mirror.Pair{Prompt: "p", Primary: mirror.Arm{Status: 200, Output: "a"}, Candidate: mirror.Arm{Status: 200, Output: "b"}}
	if jd, _ := j.Grade(ctx, []mirror.Pair{pair}, 1, 1); jd.Failed != 1 {
		t.Errorf("the judge's call through the redirect: %+v, want it failed", jd)
	}
	admin := &adminapi.Client{URL: r.from.URL, Key: "adm-key"}
	if _, err := admin.Stats(ctx); err == nil {
		t.Error("the admin client followed a redirect with its key")
	}
	admin.HTTP = http.DefaultClient // one that follows redirects: the client guards it
	if _, err := admin.Pairs(ctx); err == nil {
		t.Error("the admin client on net/http's own client followed a redirect with its key")
	}
	if got := r.seen(); len(got) != 1 {
		t.Errorf("credentials reached the redirect's target: %q", got[1:])
	}

	// A provider's own key header (Azure's api-key, x-api-key) is a key
	// too: net/http would carry it to any host.
	for _, h := range []string{"api-key", "X-API-Key", "Cookie"} {
		req, _ = http.NewRequest("POST", r.from.URL+"/v1/chat/completions", nil)
		req.Header.Set(h, "sk-own-header")
		if _, err := safehttp.Client(0).Do(req); !errors.Is(err, safehttp.ErrRedirect) {
			t.Errorf("a request with %s: %v, want ErrRedirect", h, err)
		}
	}

	// Without a key a redirect is followed as before.
	resp, err := safehttp.Client(0).Get(r.from.URL + "/health")
	if err != nil || resp.StatusCode != 200 {
		t.Errorf("a request without a key: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
}
