package main

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestServeRefusesAnOpenAdminListener: serve with the admin listener on
// every interface and no admin key stops before it listens, saying why
// and what to set; with a key file it starts, and only that key opens
// the admin routes.
func TestServeRefusesAnOpenAdminListener(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(binary, "serve", "--listen", "127.0.0.1:0", "--admin-listen", ":0")
	done := make(chan []byte, 1)
	go func() { out, _ := cmd.CombinedOutput(); done <- out }()
	select {
	case out := <-done:
		if cmd.ProcessState.Success() || !strings.Contains(string(out), "server.admin_listen :0 is reachable from other machines") ||
			!strings.Contains(string(out), "admin_auth") {
			t.Errorf("serve --admin-listen :0 with no key: %v\n%s", cmd.ProcessState, out)
		}
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		t.Fatal("serve --admin-listen :0 with no key did not stop")
	}

	key := filepath.Join(t.TempDir(), "admin-key")
	if err := os.WriteFile(key, []byte("adm-cmd-test-key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := start(t, "serve", "--admin-listen", "127.0.0.1:0", "--admin-auth-file", key)
	admin := p.adminURL(t)
	for _, tc := range []struct {
		auth string
		want int
	}{{"", 401}, {"Bearer adm-cmd-test-keyx", 401}, {"Bearer adm-cmd-test-key", 200}} {
		if st := getStatus(t, admin+"/admin/stats", tc.auth); st != tc.want {
			t.Errorf("/admin/stats with %q: %d, want %d", tc.auth, st, tc.want)
		}
	}
	// The commands that read the admin API take the key; without it the
	// gateway's refusal reaches the user.
	if out, err := exec.Command(binary, "top", "--admin", admin, "--admin-key", "adm-cmd-test-key", "--count", "1").CombinedOutput(); err != nil || !strings.Contains(string(out), "infergate top") {
		t.Errorf("top with the key: %v\n%s", err, out)
	}
	if out, err := exec.Command(binary, "top", "--admin", admin, "--count", "1").CombinedOutput(); err == nil || !strings.Contains(string(out), "401") || !strings.Contains(string(out), "admin_auth") {
		t.Errorf("top without the key: %v\n%s", err, out)
	}
	if out, err := exec.Command(binary, "config", "versions", "--admin", admin, "--admin-key", "adm-cmd-test-key").CombinedOutput(); err != nil || !strings.Contains(string(out), "version 1") {
		t.Errorf("config versions with the key: %v\n%s", err, out)
	}
}

func getStatus(t *testing.T, url, auth string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// assertPrivate fails unless each file is its owner's alone (0600).
func assertPrivate(t *testing.T, files ...string) {
	t.Helper()
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			t.Error(err)
		} else if st.Mode().Perm() != 0o600 {
			t.Errorf("%s is %v, want 0600", filepath.Base(f), st.Mode().Perm())
		}
	}
}
