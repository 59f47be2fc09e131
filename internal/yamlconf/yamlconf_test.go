package yamlconf

import (
	"strings"
	"testing"
	"time"
)

type inner struct {
	Name   string `yaml:"name"`
	Weight int    `yaml:"weight"`
}

type section struct {
	Listen string `yaml:"listen"`
}

type outer struct {
	Server  section          `yaml:"server"`
	Name    string           `yaml:"name"`
	Pools   map[string]inner `yaml:"pools"`
	List    []inner          `yaml:"list"`
	Timeout time.Duration    `yaml:"timeout"`
}

func TestDecode(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want string // in the error; empty: no error
	}{
		{"valid", "name: a\npools:\n  p:\n    weight: 2\n", ""},
		{"empty document keeps what was there", "", ""},
		{"unknown key is refused", "name: a\nnmae: b\n", "line 2, nmae: unknown key; did you mean name?"},
		{"unknown key deep, its nearest known one at its path", "pools:\n  p:\n    wieght: 2\n", "line 3, pools.p.wieght: unknown key; did you mean weight?"},
		{"unknown key holding a flow mapping: the path ends at the key", "pools:\n  p: {wieght: {a: 1}}\n", "line 2, pools.p.wieght: unknown key; did you mean weight?"},
		{"a known key in the wrong section", "listen: x\n", "line 1, listen: unknown key; it belongs at server.listen"},
		{"unknown key far from any", "list:\n  - colour: red\n", "line 2, list[0].colour: unknown key"},
		{"a bare number for a duration", "timeout: 120\n", "line 1, timeout: 120 is not a duration: write 120s"},
		{"a duration without a unit word", "timeout: soon\n", `line 1, timeout: "soon" is not a duration: write it with a unit`},
		{"type error names the field path", "pools:\n  p:\n    weight: heavy\n", `line 3, pools.p.weight: "heavy" is not a whole number`},
		{"in a list", "list:\n  - weight: 1\n  - weight: x\n", "list[1].weight"},
		{"in a flow mapping, the key of the bad value", "list:\n  - {name: 1, weight: heavy}\n", "list[0].weight"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := outer{Name: "before"}
			err := Decode([]byte(tc.yaml), &v)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Decode(%q): %v", tc.yaml, err)
				}
				if tc.yaml == "" && v.Name != "before" {
					t.Errorf("an empty document changed Name to %q", v.Name)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Decode(%q) = %v, want an error containing %q", tc.yaml, err, tc.want)
			}
		})
	}
}
