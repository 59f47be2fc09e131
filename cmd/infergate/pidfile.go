package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// serve --pid-file: the process id in a file, so a person signals this
// gateway (kill -HUP "$(cat FILE)") and not every one on the machine.
// serve and sim --addr-file: the addresses bound, for whoever started the
// process on port 0.

// pidFileFree refuses a file that names a running infergate: a second
// gateway started with the same file would take the first one's name.
// A file naming a dead process (a crash, a kill -9) is stale and is
// overwritten.
func pidFileFree(path string) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("--pid-file: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 || pid == os.Getpid() {
		return nil
	}
	if infergateRunning(pid) {
		return fmt.Errorf("--pid-file %s: infergate process %d is running with it; stop it or give another file", path, pid)
	}
	return nil
}

// infergateRunning says whether pid is alive and, where /proc tells, an
// infergate: a stale file's number may since belong to another program.
func infergateRunning(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	if err := p.Signal(syscall.Signal(0)); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	comm, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "comm"))
	if err != nil {
		return true // no /proc (macOS): alive is all that is known
	}
	return bytes.Contains(comm, []byte("infergate"))
}

// writePIDFile writes this process's id to path (through a temporary
// file and a rename, so a reader never sees half a number) and returns
// what removes it at exit, unless another process has taken the file
// over since.
func writePIDFile(path string) (remove func(), err error) {
	remove, err = writeOwnFile(path, strconv.Itoa(os.Getpid())+"\n")
	if err != nil {
		return nil, fmt.Errorf("--pid-file: %w", err)
	}
	return remove, nil
}

// addrFileHelp is --addr-file's help, for serve and sim.
const addrFileHelp = "once the listeners are bound, write their addresses to this file, a line each (\"api 127.0.0.1:41234\", \"admin ...\"): with --listen 127.0.0.1:0 a script or test learns the ports the system picked; removed at exit"

// writeAddrFile writes the bound addresses, given as name, address pairs,
// to path, a "name address" line each, and returns what removes it at
// exit.
func writeAddrFile(path string, nameAddr ...string) (remove func(), err error) {
	var b strings.Builder
	for i := 0; i+1 < len(nameAddr); i += 2 {
		fmt.Fprintf(&b, "%s %s\n", nameAddr[i], nameAddr[i+1])
	}
	remove, err = writeOwnFile(path, b.String())
	if err != nil {
		return nil, fmt.Errorf("--addr-file: %w", err)
	}
	return remove, nil
}

// writeOwnFile writes content to path through a temporary file and a
// rename, so a reader never sees half of it, and returns what removes
// it, unless another process has written the file since.
func writeOwnFile(path, content string) (remove func(), err error) {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return nil, err
	}
	return func() {
		if b, err := os.ReadFile(path); err == nil && string(b) == content {
			os.Remove(path)
		}
	}, nil
}
