package yamlconf

import (
	"strings"
	"testing"
)

type inner struct {
	Name   string `yaml:"name"`
	Weight int    `yaml:"weight"`
}

type outer struct {
	Name  string           `yaml:"name"`
	Pools map[string]inner `yaml:"pools"`
	List  []inner          `yaml:"list"`
}

func TestDecode(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want string // in the error; empty: no error
	}{
		{"valid", "name: a\npools:\n  p:\n    weight: 2\n", ""},
		{"empty document keeps what was there", "", ""},
		{"unknown key is refused", "name: a\nnmae: b\n", "nmae"},
		{"type error names the field path", "pools:\n  p:\n    weight: heavy\n", "field pools.p.weight"},
		{"in a list", "list:\n  - weight: 1\n  - weight: x\n", "field list[1].weight"},
		{"in a flow mapping, the key of the bad value", "list:\n  - {name: 1, weight: heavy}\n", "field list[0].weight"},
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
