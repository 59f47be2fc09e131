//go:build race

package bench

// raceBuild: the race detector slows pure arithmetic tenfold; the
// statistical tests run a smaller sample under it, and in full in CI's
// pass without it.
const raceBuild = true
