// Package testredis finds the real Redis server of the integration tests.
package testredis

import (
	"net"
	"os"
	"testing"
	"time"
)

// Addr returns the address of the Redis server the integration tests
// use: INFERGATE_TEST_REDIS (which .ci/run sets; then it must answer), or
// 127.0.0.1:6379 when something answers there. Otherwise tb skips.
func Addr(tb testing.TB) string {
	tb.Helper()
	addr, set := os.LookupEnv("INFERGATE_TEST_REDIS")
	if !set {
		addr = "127.0.0.1:6379"
	}
	c, err := net.DialTimeout("tcp", addr, 300*time.Millisecond)
	if err != nil {
		if set {
			tb.Fatalf("INFERGATE_TEST_REDIS=%s: %v", addr, err)
		}
		tb.Skip("no Redis on 127.0.0.1:6379 and INFERGATE_TEST_REDIS not set")
	}
	c.Close()
	return addr
}
