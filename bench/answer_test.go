package bench

import (
	"strings"
	"testing"
)

func TestDescribeAnswer(t *testing.T) {
	t.Parallel()
	page := "<html><head><title>\n  Sign in · Corp SSO\n</title></head><body>" + strings.Repeat("<div>x</div>", 500) + "</body></html>"
	for _, c := range []struct {
		status int
		ct     string
		body   string
		want   string
	}{
		{401, "application/json", `{"error":{"message":"Incorrect API key","type":"invalid_request_error"}}`, "status 401, application/json: " + KeyHint + ": Incorrect API key (invalid_request_error)"},
		{403, "", "", "status 403: " + KeyHint},
		{502, "application/json", `{"error":{"message":"the gateway could not connect to a backend","type":"server_error","code":null}}`, "status 502, application/json: the gateway could not connect to a backend (server_error)"},
		{400, "application/json", `{"object":"error","message":"max_tokens is too large","type":"BadRequestError","code":400}`, "status 400, application/json: max_tokens is too large"},
		{422, "application/json", `{"detail":"Not Found"}`, "status 422, application/json: Not Found"},
		{500, "application/json", `{"error":"boom"}`, "status 500, application/json: boom"},
		{200, "text/html; charset=utf-8", page, `status 200, text/html: "Sign in · Corp SSO"; want JSON`},
		{502, "text/html", "<html><body><h1>Bad   gateway</h1>\n<p>nginx</p></body></html>", `status 502, text/html: "Bad gateway nginx"; want JSON`},
		{200, "text/plain", strings.Repeat("é", 200), `status 200, text/plain: "` + strings.Repeat("é", 60) + `…"; want JSON`},
		{200, "", "", "status 200: an empty body; want JSON"},
	} {
		// The expectation is named only for a body that says nothing itself.
		got, want := DescribeAnswer(c.status, c.ct, []byte(c.body), "JSON"), c.want
		if got != want {
			t.Errorf("DescribeAnswer(%d, %q, %.40q):\n got %s\nwant %s", c.status, c.ct, c.body, got, want)
		}
	}
}
