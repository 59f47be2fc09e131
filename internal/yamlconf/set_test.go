package yamlconf

import (
	"strings"
	"testing"
	"time"
)

type setCap struct {
	MaxRequests int64 `yaml:"max_requests"`
}

type setRoot struct {
	Global  setCap            `yaml:"global"`
	Pools   map[string]setCap `yaml:"pools"`
	Timeout time.Duration     `yaml:"timeout"`
	Queue   *struct {
		Max int `yaml:"max"`
	} `yaml:"queue"`
	Inline struct {
		Trim string `yaml:"trim"`
	} `yaml:",inline"`
}

func TestSetCopiesAlongThePath(t *testing.T) {
	orig := setRoot{Pools: map[string]setCap{"a": {MaxRequests: 4}}}
	got, err := Set(orig, "pools.a.max_requests", "9")
	if err != nil {
		t.Fatal(err)
	}
	if got.Pools["a"].MaxRequests != 9 || orig.Pools["a"].MaxRequests != 4 {
		t.Errorf("set %d, original now %d (want 9, 4)", got.Pools["a"].MaxRequests, orig.Pools["a"].MaxRequests)
	}
	for path, val := range map[string]string{"global.max_requests": "24", "timeout": "1.5s", "queue.max": "64", "trim": "drop_oldest", "pools.new.max_requests": "2"} {
		if got, err = Set(got, path, val); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	f := Flatten(got)
	for path, val := range map[string]string{"global.max_requests": "24", "timeout": "1.5s", "queue.max": "64", "trim": "drop_oldest", "pools.new.max_requests": "2", "pools.a.max_requests": "9"} {
		if f[path] != val {
			t.Errorf("%s = %q, want %q", path, f[path], val)
		}
	}
	if orig.Queue != nil || orig.Global.MaxRequests != 0 {
		t.Errorf("original changed: %+v", orig)
	}
}

func TestSetRefuses(t *testing.T) {
	for path, val := range map[string]string{"global.nope": "1", "global.max_requests": "many", "timeout": "soon", "global": "3", "global.max_requests.x": "1"} {
		if _, err := Set(setRoot{}, path, val); err == nil || !strings.Contains(err.Error(), "setting "+path) {
			t.Errorf("%s=%s: %v", path, val, err)
		}
	}
}

// Set is fed by POST /admin/config/set: any path and value give a
// copy or an error, never a panic, and never change the original.
func FuzzSet(f *testing.F) {
	f.Add("pools.a.max_requests", "9")
	f.Add("queue.max", "-1")
	f.Add("timeout", "1h")
	f.Add("..", "")
	f.Add("pools..max_requests", "1")
	f.Add("global", "{}")
	f.Fuzz(func(t *testing.T, path, value string) {
		orig := setRoot{Pools: map[string]setCap{"a": {MaxRequests: 4}}}
		got, err := Set(orig, path, value)
		if orig.Pools["a"].MaxRequests != 4 || len(orig.Pools) != 1 || orig.Queue != nil {
			t.Fatalf("Set(%q, %q) changed the original: %+v", path, value, orig)
		}
		if err == nil {
			_ = Flatten(got)
		}
	})
}
