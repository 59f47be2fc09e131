package quality

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// TestSchemaBounds: a schema is a client's input. One that references a
// URL is refused without a request going out; one deep enough or with
// references enough to take the judge seconds or hours is refused before
// it is compiled; an ordinary schema with definitions still works.
func TestSchemaBounds(t *testing.T) {
	var fetched atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetched.Add(1)
		fmt.Fprint(w, `{"type":"string"}`)
	}))
	defer srv.Close()
	j, err := NewJudge(nil)
	if err != nil {
		t.Fatal(err)
	}

	fib := func(n int) string { // each definition an anyOf of the next two: validation unfolds them all
		var b strings.Builder
		b.WriteString(`{"$defs":{`)
		for i := range n {
			fmt.Fprintf(&b, `"d%d":{"anyOf":[{"$ref":"#/$defs/d%d"},{"$ref":"#/$defs/d%d"}]},`, i, i+1, i+2)
		}
		fmt.Fprintf(&b, `"d%d":false,"d%d":false},"$ref":"#/$defs/d0"}`, n, n+1)
		return b.String()
	}
	for name, schema := range map[string]string{
		"a remote $ref":         `{"$ref":"` + srv.URL + `/s.json"}`,
		"a remote $schema":      `{"$schema":"` + srv.URL + `/meta.json","type":"object"}`,
		"a remote $ref, nested": `{"type":"object","properties":{"a":{"$ref":"` + srv.URL + `/a.json"}}}`,
		"a file $ref":           `{"$ref":"file:///etc/passwd"}`,
		"1,000 levels deep":     strings.Repeat(`{"properties":{"a":`, 1000) + `{}` + strings.Repeat(`}}`, 1000),
		"unfolding references":  fib(40),
		"larger than the bound": `{"description":"` + strings.Repeat("x", maxSchemaBytes) + `"}`,
		"deep arrays":           `{"enum":[` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `]}`,
		"a $dynamicRef storm":   `{"$defs":{` + strings.Repeat(`"x":{"$dynamicRef":"#a"},`, 30) + `"y":{}}}`,
	} {
		if j.SchemaUsable([]byte(schema)) {
			t.Errorf("%s: the schema was accepted", name)
		}
		// Judging an answer against it does not hang either.
		j.Judge(Answer{Text: []byte(`{"a":"b"}`), Ask: Ask{JSON: true, Schema: []byte(schema)}})
	}
	if n := fetched.Load(); n != 0 {
		t.Errorf("schemas from clients made %d requests", n)
	}

	ok := `{"$defs":{"addr":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}},` +
		`"type":"object","properties":{"home":{"$ref":"#/$defs/addr"},"work":{"$ref":"#/$defs/addr"}},"required":["home"]}`
	if !j.SchemaUsable([]byte(ok)) {
		t.Fatal("an ordinary schema with definitions is refused")
	}
	good := j.Judge(Answer{Text: []byte(`{"home":{"city":"Oslo"}}`), Ask: Ask{JSON: true, Schema: []byte(ok)}})
	bad := j.Judge(Answer{Text: []byte(`{"home":{"town":"Oslo"}}`), Ask: Ask{JSON: true, Schema: []byte(ok)}})
	if good.SchemaInvalid || !bad.SchemaInvalid {
		t.Errorf("the ordinary schema judges wrongly: fitting %+v, not fitting %+v", good, bad)
	}
}

func TestJSONDepth(t *testing.T) {
	for raw, want := range map[string]int{
		`{}`: 1, `[[]]`: 2, `{"a":"{{{{"}`: 1, `{"a":"\"{{"}`: 1, `"x"`: 0, `{"a":[{"b":[]}]}`: 4,
	} {
		if got := jsonDepth([]byte(raw)); got != want {
			t.Errorf("jsonDepth(%s) = %d, want %d", raw, got, want)
		}
	}
}
