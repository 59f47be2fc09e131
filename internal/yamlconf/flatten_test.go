package yamlconf

import (
	"maps"
	"testing"
	"time"
)

func TestFlatten(t *testing.T) {
	type inner struct {
		Max   int           `yaml:"max_requests"`
		Wait  time.Duration `yaml:"wait"`
		Skip  string        `yaml:"-"`
		Empty string        `yaml:"empty"`
	}
	type cfg struct {
		Global inner            `yaml:"global"`
		Pools  map[string]inner `yaml:"pools"`
		List   []string         `yaml:"list"`
		Ptr    *inner           `yaml:"ptr"`
	}
	got := Flatten(cfg{Global: inner{Max: 24, Wait: 2 * time.Second, Skip: "x"}, Pools: map[string]inner{"b": {Max: 2}, "a": {Max: 1}}, List: []string{"p", "q"}})
	want := map[string]string{"global.max_requests": "24", "global.wait": "2s", "pools.a.max_requests": "1", "pools.b.max_requests": "2", "list[0]": "p", "list[1]": "q"}
	if !maps.Equal(got, want) {
		t.Errorf("Flatten = %v, want %v", got, want)
	}
}
