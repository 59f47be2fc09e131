package main

import (
	"fmt"
	"io"
	"path/filepath"

	"github.com/infergate/infergate/internal/svgchart"
	"github.com/infergate/infergate/tune"
)

// pageSet is the pages a command writes into one folder, and the folder's
// index.html: a link to each with its one-line verdict. The index is
// rewritten with every page, so a run cut short still leaves one that
// lists what it wrote.
type pageSet struct {
	dir, title string
	entries    []svgchart.IndexEntry
}

// write writes a page as file in the folder and lists it in the index
// with its title, verdict and the verdict's tone (svgchart.Tone).
func (p *pageSet) write(file, title, verdict, tone string, page func(io.Writer) error) error {
	if err := writeFileWith(filepath.Join(p.dir, file), page); err != nil {
		return err
	}
	p.entries = append(p.entries, svgchart.IndexEntry{File: file, Title: title, Verdict: verdict, Tone: tone})
	if err := writeFileWith(filepath.Join(p.dir, "index.html"), func(w io.Writer) error { return svgchart.WriteIndex(w, p.title, p.entries) }); err != nil {
		return fmt.Errorf("index of %s: %w", p.dir, err)
	}
	return nil
}

// tunePages writes a tune walk's page, and its baseline's diagnosis when
// it has one, into the set.
func (p *pageSet) tune(res *tune.Result, tuneFile, tuneTitle, diagFile string) error {
	line, tone := res.Headline()
	if err := p.write(tuneFile, tuneTitle, line, tone, res.WriteHTML); err != nil {
		return err
	}
	if rep := res.Report; rep != nil {
		return p.write(diagFile, "the baseline's diagnosis", fmt.Sprintf("bottleneck: %s (confidence %s)", rep.Bottleneck, rep.Confidence), "",
			func(w io.Writer) error { return rep.WriteHTML(w, "infergate diagnose: "+rep.Bottleneck) })
	}
	return nil
}
