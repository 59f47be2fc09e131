package httpurl

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, c := range []struct{ raw, want string }{
		{"127.0.0.1:8000", `"127.0.0.1:8000" has no scheme: did you mean http://127.0.0.1:8000?`},
		{"localhost:8000/v1", `"localhost:8000/v1" has no scheme: did you mean http://localhost:8000/v1?`},
		{"gpu-1", `"gpu-1" has no scheme: did you mean http://gpu-1?`},
		{"ftp://h:1", `"ftp://h:1": scheme "ftp", want http:// or https://`},
		{"http://", `"http://" has no host: want http://host:port`},
		{"http://h:x", `"http://h:x": invalid port ":x" after host`},
		{"", "empty URL: want http://host:port"},
	} {
		_, err := Parse(c.raw)
		if err == nil || err.Error() != c.want {
			t.Errorf("Parse(%q) = %v, want %s", c.raw, err, c.want)
		}
	}
	for _, ok := range []string{"http://127.0.0.1:8000", "https://api.example.com/v1/chat/completions"} {
		if u, err := Parse(ok); err != nil || !strings.HasPrefix(ok, u.Scheme+"://"+u.Host) {
			t.Errorf("Parse(%q) = %v, %v", ok, u, err)
		}
	}
}
