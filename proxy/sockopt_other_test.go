//go:build !linux

package proxy

import "syscall"

func setSmallRcvBuf(_, _ string, _ syscall.RawConn) error { return nil }
