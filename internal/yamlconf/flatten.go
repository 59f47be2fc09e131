package yamlconf

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"
)

// Flatten lists v's non-zero fields by their YAML paths
// ("shaping.global.max_requests": "24"): what a person compares between
// two configurations. Map keys are sorted; durations print as Go
// durations; fields tagged yaml:"-" and unexported ones are left out.
func Flatten(v any) map[string]string {
	out := map[string]string{}
	flatten(out, "", reflect.ValueOf(v))
	return out
}

func flatten(out map[string]string, prefix string, v reflect.Value) {
	join := func(k string) string {
		if prefix == "" {
			return k
		}
		return prefix + "." + k
	}
	if v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return
		}
		v = v.Elem()
	}
	if v.Type() == reflect.TypeFor[time.Duration]() {
		if v.Int() != 0 {
			out[prefix] = time.Duration(v.Int()).String()
		}
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			name, inline, ok := yamlName(t.Field(i))
			switch {
			case !ok:
			case inline:
				flatten(out, prefix, v.Field(i))
			default:
				flatten(out, join(name), v.Field(i))
			}
		}
	case reflect.Map:
		keys := v.MapKeys()
		names := make(map[string]reflect.Value, len(keys))
		for _, k := range keys {
			names[fmt.Sprint(k.Interface())] = v.MapIndex(k)
		}
		for _, k := range slices.Sorted(maps.Keys(names)) {
			flatten(out, join(k), names[k])
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			flatten(out, fmt.Sprintf("%s[%d]", prefix, i), v.Index(i))
		}
	default:
		if !v.IsZero() {
			out[prefix] = fmt.Sprint(v.Interface())
		}
	}
}

// yamlName is a struct field's YAML key as yaml.v3 names it: its tag's
// name, else its lower-cased Go name; inline when its fields sit in the
// parent's mapping; ok false for a field YAML leaves out (unexported, or
// tagged "-").
func yamlName(f reflect.StructField) (name string, inline, ok bool) {
	tag := f.Tag.Get("yaml")
	if !f.IsExported() || tag == "-" {
		return "", false, false
	}
	name, opts, _ := strings.Cut(tag, ",")
	if strings.Contains(opts, "inline") {
		return "", true, true
	}
	if name == "" {
		name = strings.ToLower(f.Name)
	}
	return name, false, true
}
