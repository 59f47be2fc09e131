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
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			tag := f.Tag.Get("yaml")
			name, opts, _ := strings.Cut(tag, ",")
			switch {
			case tag == "-":
				continue
			case strings.Contains(opts, "inline"):
				flatten(out, prefix, v.Field(i))
				continue
			case name == "":
				name = strings.ToLower(f.Name)
			}
			flatten(out, join(name), v.Field(i))
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
