package yamlconf

import (
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"time"

	"github.com/infergate/infergate/internal/suggest"
)

var (
	// yaml.v3's words for an unknown key, after nameFields:
	// "line 5, field shaping.global.max_request: field max_request not found in type shaping.Cap".
	unknownRe = regexp.MustCompile(`line (\d+)(?:, field (\S+))?: field (\S+) not found in type (\S+)`)
	// and for a value of the wrong kind:
	// "line 7, field server.read_timeout: cannot unmarshal !!int `120` into time.Duration".
	kindRe = regexp.MustCompile("line (\\d+)(?:, field (\\S+))?: cannot unmarshal !!(\\w+) `([^`]*)` into (\\S+)")
)

var durationType = reflect.TypeFor[time.Duration]().String()

// speakYAML rewrites yaml.v3's Go-speaking errors in the file's own terms:
// an unknown key says so and names the nearest key v knows at that place,
// a bare number where a duration goes says to write its unit.
func speakYAML(msg string, v any) string {
	msg = unknownRe.ReplaceAllStringFunc(msg, func(m string) string {
		g := unknownRe.FindStringSubmatch(m)
		line, path, key := g[1], keyPath(g[2], g[3]), g[3]
		s := fmt.Sprintf("line %s, %s: unknown key", line, path)
		// A key known exactly elsewhere says more than a near miss here.
		if at := placeOf(reflect.TypeOf(v), key); at != "" && at != path {
			s += "; it belongs at " + at
		} else if near := suggest.Nearest(key, keysOf(reflect.TypeOf(v), g[4])); near != "" {
			s += "; did you mean " + near + "?"
		}
		return s
	})
	return kindRe.ReplaceAllStringFunc(msg, func(m string) string {
		g := kindRe.FindStringSubmatch(m)
		at := "line " + g[1]
		if g[2] != "" {
			at += ", " + g[2]
		}
		kind, val, into := g[3], g[4], g[5]
		switch {
		case into == durationType && (kind == "int" || kind == "float"):
			return fmt.Sprintf("%s: %s is not a duration: write %ss (or another unit: ms, s, m, h)", at, val, val)
		case into == durationType:
			return fmt.Sprintf("%s: %q is not a duration: write it with a unit, e.g. 120s or 500ms", at, val)
		case strings.HasPrefix(into, "int") || strings.HasPrefix(into, "uint"):
			return fmt.Sprintf("%s: %q is not a whole number", at, val)
		case strings.HasPrefix(into, "float"):
			return fmt.Sprintf("%s: %q is not a number", at, val)
		case into == "bool":
			return fmt.Sprintf("%s: %q is not true or false", at, val)
		}
		return m
	})
}

// keyPath cuts the path nameFields found at an unknown key's line back
// to the key itself: on a line like "prise: {input: 1}" the path runs on
// into the value's keys.
func keyPath(path, key string) string {
	for end := len(path); end > 0; {
		i := strings.LastIndex(path[:end], key)
		if i < 0 {
			break
		}
		j := i + len(key)
		if (i == 0 || path[i-1] == '.') && (j == len(path) || path[j] == '.' || path[j] == '[') {
			return path[:j]
		}
		end = i
	}
	if path == "" {
		return key
	}
	return path
}

// keysOf returns the YAML keys of the struct type named name reachable
// from t (through pointers, slices, arrays and map values), the way
// yaml.v3 names them: the tag's name, else the lowercased field name,
// inline structs flattened.
func keysOf(t reflect.Type, name string) []string {
	seen := map[reflect.Type]bool{}
	var find func(t reflect.Type) []string
	find = func(t reflect.Type) []string {
		if t == nil || seen[t] {
			return nil
		}
		seen[t] = true
		switch t.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Map:
			return find(t.Elem())
		case reflect.Struct:
			if t.String() == name {
				return structKeys(t)
			}
			for i := range t.NumField() {
				if k := find(t.Field(i).Type); k != nil {
					return k
				}
			}
		}
		return nil
	}
	return find(t)
}

// placeOf is the path of key in the file's layout when it is a known key
// somewhere else, found through nested sections only (not lists or maps,
// whose entries have no single path): "listen" at the top is server.listen.
func placeOf(t reflect.Type, key string) string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return ""
	}
	var found []string
	var walk func(t reflect.Type, at string, depth int)
	walk = func(t reflect.Type, at string, depth int) {
		if depth > 4 {
			return
		}
		for i := range t.NumField() {
			f := t.Field(i)
			name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if !f.IsExported() || name == "-" {
				continue
			}
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if strings.Contains(","+opts+",", ",inline,") && ft.Kind() == reflect.Struct {
				walk(ft, at, depth)
				continue
			}
			if name == "" {
				name = strings.ToLower(f.Name)
			}
			p := name
			if at != "" {
				p = at + "." + name
			}
			if name == key {
				found = append(found, p)
			}
			if ft.Kind() == reflect.Struct && ft.PkgPath() != "time" {
				walk(ft, p, depth+1)
			}
		}
	}
	walk(t, "", 0)
	if len(found) != 1 {
		return "" // nowhere, or in several places: no one answer
	}
	return found[0]
}

func structKeys(t reflect.Type) []string {
	var keys []string
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("yaml")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if strings.Contains(","+opts+",", ",inline,") {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				keys = append(keys, structKeys(ft)...)
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		keys = append(keys, name)
	}
	return keys
}
