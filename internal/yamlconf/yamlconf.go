// Package yamlconf reads every configuration file of infergate the same
// way: strictly (an unknown key is an error, so a typo never falls back
// to a default) and with errors that name the field path and speak YAML,
// not Go ("line 7, shaping.global.max_request: unknown key; did you mean
// max_requests?", "line 9, server.read_timeout: 120 is not a duration:
// write 120s").
package yamlconf

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Load decodes the YAML file at path into v, over what v already holds.
func Load(path string, v any) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if err := Decode(raw, v); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	return nil
}

// Decode decodes raw into v, over what v already holds. Unknown keys are
// errors; errors name the field at each line they cite, in YAML's terms
// (an unknown key with the nearest known one, "write 120s"). An empty
// document leaves v as it is.
func Decode(raw []byte, v any) error {
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		return errors.New(speakYAML(nameFields(raw, err.Error()), v))
	}
	return nil
}

var (
	lineRe  = regexp.MustCompile(`line (\d+): `)
	valueRe = regexp.MustCompile("line (\\d+): cannot unmarshal !!\\w+ `([^`]*)`")
)

// nameFields adds the dotted path of the field at each "line N:" of a YAML
// decoding error, which yaml.v3 reports by line only for type errors.
func nameFields(raw []byte, msg string) string {
	var root yaml.Node
	if yaml.Unmarshal(raw, &root) != nil {
		return msg
	}
	// The value a type error quotes tells apart the keys of a flow
	// mapping ({input: 1, output: cheap}), which share a line.
	values := map[int]string{}
	for _, m := range valueRe.FindAllStringSubmatch(msg, -1) {
		n, _ := strconv.Atoi(m[1])
		values[n] = m[2]
	}
	return lineRe.ReplaceAllStringFunc(msg, func(m string) string {
		n, _ := strconv.Atoi(lineRe.FindStringSubmatch(m)[1])
		p := ""
		if v, ok := values[n]; ok {
			p = fieldAt(&root, n, &v, nil)
		}
		if p == "" {
			p = fieldAt(&root, n, nil, nil)
		}
		if p != "" {
			return fmt.Sprintf("line %d, field %s: ", n, p)
		}
		return m
	})
}

// fieldAt returns the path of the mapping key whose value starts on
// line (and is value, when value is not nil).
func fieldAt(n *yaml.Node, line int, value *string, path []string) string {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if p := fieldAt(c, line, value, path); p != "" {
				return p
			}
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := append(slices.Clone(path), k.Value)
			if v.Kind == yaml.ScalarNode && (v.Line == line || k.Line == line) && (value == nil || v.Value == *value) {
				return strings.Join(p, ".")
			}
			if r := fieldAt(v, line, value, p); r != "" {
				return r
			}
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			p := slices.Clone(path)
			if len(p) > 0 {
				p[len(p)-1] += "[" + strconv.Itoa(i) + "]"
			}
			if r := fieldAt(c, line, value, p); r != "" {
				return r
			}
		}
	}
	return ""
}
