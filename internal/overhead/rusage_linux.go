package overhead

import (
	"os"
	"syscall"
)

// peakRSSKiB is a finished child's peak resident set, which Linux reports
// in KiB.
func peakRSSKiB(st *os.ProcessState) int64 {
	if ru, ok := st.SysUsage().(*syscall.Rusage); ok {
		return ru.Maxrss
	}
	return 0
}
