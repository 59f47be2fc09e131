package svgchart

import (
	"fmt"
	"html"
	"io"
)

// CSP is the pages' Content-Security-Policy: they run no script and
// fetch nothing, so a prompt or an answer that slipped past escaping
// still could not run, load or send anything.
const CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"

// PageStart writes the head of a self-contained report page: the policy,
// the title and the page's own style, nothing fetched.
func PageStart(w io.Writer, title string) {
	fmt.Fprintf(w, `<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="`+CSP+`">
<title>%s</title>
<style>
body{font-family:sans-serif;margin:24px;color:#222;max-width:1100px}
table{border-collapse:collapse;margin:8px 0 16px}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:left;font-size:13px}
table.num td{text-align:right}
svg.chart{display:block;margin:12px 0;border:1px solid #eee}
.verdict{font-size:20px;font-weight:bold}
pre{white-space:pre-wrap;background:#f7f7f7;padding:8px;font-size:12px}
</style></head><body>
<h1>%s</h1>
`, html.EscapeString(title), html.EscapeString(title))
}

// PageEnd closes a report page.
func PageEnd(w io.Writer) { fmt.Fprintf(w, "</body></html>\n") }
