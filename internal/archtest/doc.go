// Package archtest holds the test that keeps DESIGN.md's dependency
// rules: which packages may import which. It has no code of its own.
package archtest
