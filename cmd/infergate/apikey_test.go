package main

import (
	"strings"
	"testing"
)

func TestAPIKeyNeverGoesInPlainTextOffHost(t *testing.T) {
	tests := []struct {
		name       string
		explicit   string
		env        string
		allowPlain bool
		urls       []string
		sent       bool
		err        bool
	}{
		{"env key to loopback over http", "", "sk-env", false, []string{"http://127.0.0.1:8000"}, true, false},
		{"env key to localhost", "", "sk-env", false, []string{"http://localhost:8000/v1"}, true, false},
		{"env key to IPv6 loopback", "", "sk-env", false, []string{"http://[::1]:8000"}, true, false},
		{"env key over https", "", "sk-env", false, []string{"https://api.example.com/v1"}, true, false},
		// Left out, with a warning: the env key may be meant for another server.
		{"env key over http off host", "", "sk-env", false, []string{"http://10.0.0.5:8000"}, false, false},
		{"explicit key over http off host", "sk-flag", "", false, []string{"http://gpu-box:8000"}, false, true},
		{"explicit key, direct url off host", "sk-flag", "", false, []string{"http://127.0.0.1:8080", "http://gpu-box:8000"}, false, true},
		{"allowed by flag", "sk-flag", "", true, []string{"http://gpu-box:8000"}, true, false},
		{"no key", "", "", false, []string{"http://gpu-box:8000"}, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("OPENAI_API_KEY", tc.env)
			var warn strings.Builder
			h, err := apiKeyHeader(tc.explicit, tc.allowPlain, &warn, tc.urls...)
			if (err != nil) != tc.err {
				t.Fatalf("err %v, want error %v", err, tc.err)
			}
			if sent := len(h) == 1; sent != tc.sent {
				t.Errorf("header %v, want sent %v", h, tc.sent)
			}
			if tc.env != "" && !tc.sent && !strings.Contains(warn.String(), "not sent") {
				t.Errorf("no warning when leaving the environment's key out: %q", warn.String())
			}
		})
	}
}
