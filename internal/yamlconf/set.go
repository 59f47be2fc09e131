package yamlconf

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// Set returns a copy of v (a struct) with the field at a YAML path
// ("shaping.global.max_requests") set from its text, the inverse of one
// line of Flatten. Maps and pointers along the path are copied, not
// written through, so v and anything sharing its maps stay as they were.
// It sets scalars only (integers, floats, booleans, strings, durations);
// a path that names no field, or a value that does not parse, is an
// error naming it.
func Set[T any](v T, path, value string) (T, error) {
	rv := reflect.ValueOf(&v).Elem()
	if err := set(rv, strings.Split(path, "."), value, path); err != nil {
		return v, err
	}
	return v, nil
}

func set(v reflect.Value, path []string, value, full string) error {
	if len(path) == 0 {
		return setScalar(v, value, full)
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		} else {
			c := reflect.New(v.Type().Elem())
			c.Elem().Set(v.Elem())
			v.Set(c)
		}
		return set(v.Elem(), path, value, full)
	case reflect.Struct:
		f, ok := fieldByYAML(v, path[0])
		if !ok {
			return fmt.Errorf("setting %s: no field %q", full, path[0])
		}
		return set(f, path[1:], value, full)
	case reflect.Map:
		if v.Type().Key().Kind() != reflect.String {
			return fmt.Errorf("setting %s: map keyed by %s", full, v.Type().Key())
		}
		m := reflect.MakeMapWithSize(v.Type(), v.Len()+1)
		for it := v.MapRange(); it.Next(); {
			m.SetMapIndex(it.Key(), it.Value())
		}
		key := reflect.ValueOf(path[0]).Convert(v.Type().Key())
		elem := reflect.New(v.Type().Elem()).Elem()
		if old := v.MapIndex(key); old.IsValid() {
			elem.Set(old)
		}
		if err := set(elem, path[1:], value, full); err != nil {
			return err
		}
		m.SetMapIndex(key, elem)
		v.Set(m)
		return nil
	}
	return fmt.Errorf("setting %s: %q is not a section", full, path[0])
}

// fieldByYAML finds a struct's field by its YAML name, looking inside
// inlined fields.
func fieldByYAML(v reflect.Value, name string) (reflect.Value, bool) {
	t := v.Type()
	for i := range t.NumField() {
		n, inline, ok := yamlName(t.Field(i))
		switch {
		case !ok:
		case inline:
			if got, found := fieldByYAML(v.Field(i), name); found {
				return got, true
			}
		case n == name:
			return v.Field(i), true
		}
	}
	return reflect.Value{}, false
}

func setScalar(v reflect.Value, s, full string) error {
	bad := func(err error) error { return fmt.Errorf("setting %s to %q: %w", full, s, err) }
	if v.Type() == reflect.TypeFor[time.Duration]() {
		d, err := time.ParseDuration(s)
		if err != nil {
			return bad(err)
		}
		v.SetInt(int64(d))
		return nil
	}
	switch v.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, err := strconv.ParseInt(s, 10, v.Type().Bits())
		if err != nil {
			return bad(err)
		}
		v.SetInt(n)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, err := strconv.ParseUint(s, 10, v.Type().Bits())
		if err != nil {
			return bad(err)
		}
		v.SetUint(n)
	case reflect.Float32, reflect.Float64:
		f, err := strconv.ParseFloat(s, v.Type().Bits())
		if err != nil {
			return bad(err)
		}
		v.SetFloat(f)
	case reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return bad(err)
		}
		v.SetBool(b)
	case reflect.String:
		v.SetString(s)
	default:
		return fmt.Errorf("setting %s: a %s is not a single value", full, v.Type())
	}
	return nil
}
