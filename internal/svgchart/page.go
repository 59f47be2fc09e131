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
// "body"; its data has a Title. "rows" writes a [][]string as table rows.
const shell = `<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="` + CSP + `">
<title>{{.Title}}</title>
<style>
body{font-family:sans-serif;margin:24px;color:#222;max-width:1100px}
table{border-collapse:collapse;margin:8px 0 16px}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:left;font-size:13px}
table.num td{text-align:right}
svg.chart{display:block;margin:12px 0;border:1px solid #eee}
.verdict{font-size:20px;font-weight:bold}
pre{white-space:pre-wrap;background:#f7f7f7;padding:8px;font-size:12px}
</style></head><body>
<h1>{{.Title}}</h1>
{{template "body" .}}</body></html>
{{define "rows"}}{{range .}}<tr>{{range .}}<td>{{.}}</td>{{end}}</tr>
{{end}}{{end}}`

// Page parses a self-contained report page: the shell (policy, title,
// style) around body, a template that defines "body". html/template
// escapes every value the data holds; only charts (SVG) go in as they
// are. It panics on a template that does not parse, as template.Must.
func Page(body string) *template.Template {
	return template.Must(template.Must(template.New("page").Parse(shell)).Parse(body))
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
