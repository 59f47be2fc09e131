package svgchart

import (
	"bufio"
	"html/template"
	"io"
	"strings"
)

// CSP is the pages' Content-Security-Policy: they run no script and
// fetch nothing, so a prompt or an answer that slipped past escaping
// still could not run, load or send anything.
const CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"

// shell is every report page around its body: the policy, the title and
// the page's own style, nothing fetched. A page's template defines
// "body"; its data has a Title. "rows" writes a [][]string as table rows,
// a cell that is a verdict coloured by it (tone).
const shell = `<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="` + CSP + `">
<title>{{.Title}}</title>
<style>
body{font-family:sans-serif;margin:24px;color:#222;max-width:1320px}
table{border-collapse:collapse;margin:8px 0 16px}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:left;font-size:13px}
table.num td{text-align:right}
svg.chart{display:block;margin:12px 0;border:1px solid #eee;max-width:100%;height:auto}
.verdict{font-size:20px;font-weight:bold}
.good{color:#006d2c}.bad{color:#b2182b}.unsure{color:#9a6700}
td.good,td.bad,td.unsure{font-weight:bold}
pre{white-space:pre-wrap;background:#f7f7f7;padding:8px;font-size:12px}
</style></head><body>
<h1>{{.Title}}</h1>
{{template "body" .}}</body></html>
{{define "rows"}}{{range .}}<tr>{{range .}}<td{{with tone .}} class="{{.}}"{{end}}>{{.}}</td>{{end}}</tr>
{{end}}{{end}}`

// Page parses a self-contained report page: the shell (policy, title,
// style) around body, a template that defines "body". html/template
// escapes every value the data holds; only charts (SVG) go in as they
// are. It panics on a template that does not parse, as template.Must.
func Page(body string) *template.Template {
	return template.Must(template.Must(template.New("page").Funcs(template.FuncMap{"tone": Tone}).Parse(shell)).Parse(body))
}

// Tone is the class a verdict is coloured by: "good" (green) for one
// that keeps or holds, "bad" (red) for one that rolls back or regressed,
// "unsure" (amber) for one that cannot say, "" for any other text. Only
// the whole text counts, so a sentence that mentions a word stays black.
func Tone(v string) string {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "keep", "holds", "improved", "better", "pass", "ok":
		return "good"
	case "roll back", "regressed", "worse", "fail", "failed":
		return "bad"
	case "inconclusive", "unsure":
		return "unsure"
	}
	return ""
}

// WritePage executes page (Page's) with data into w.
func WritePage(w io.Writer, page *template.Template, data any) error {
	bw := bufio.NewWriter(w)
	if err := page.Execute(bw, data); err != nil {
		return err
	}
	return bw.Flush()
}

// SVG is the chart as markup a page's template inserts as it is: Write
// escapes every text the chart holds.
func (c *Chart) SVG() template.HTML {
	var b strings.Builder
	_ = c.Write(&b)                  // a strings.Builder does not fail
	return template.HTML(b.String()) //nolint:gosec // Write escapes the chart's text
}

// IndexEntry is one page of a set: its file (relative to the index),
// title and one-line verdict, coloured by Tone.
type IndexEntry struct {
	File, Title, Verdict, Tone string
}

var indexHTML = Page(`{{define "body"}}<table>
<tr><th>page</th><th>verdict</th></tr>
{{range .Entries}}<tr><td><a href="{{.File}}">{{.Title}}</a></td><td{{with .Tone}} class="{{.}}"{{end}}>{{.Verdict}}</td></tr>
{{end}}</table>
{{end}}`)

// WriteIndex writes the index of a set of pages a command wrote into one
// folder: a link to each with its verdict, so the folder opens on one page.
func WriteIndex(w io.Writer, title string, entries []IndexEntry) error {
	return WritePage(w, indexHTML, struct {
		Title   string
		Entries []IndexEntry
	}{title, entries})
}
