package main

import (
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/infergate/infergate/sim"
)

func TestSimFlagPrecedence(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "sim.yaml")
	os.WriteFile(file, []byte("engine:\n  max_num_seqs: 5\n  block_size: 32\n"), 0o600)
	cfg, _, _, err := parseSimFlags([]string{"--preset", "memory-bound", "--config", file, "--max-num-seqs", "9", "--itl", "3ms"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case cfg.Engine.MaxNumSeqs != 9:
		t.Errorf("max_num_seqs %d: the flag should win over the file", cfg.Engine.MaxNumSeqs)
	case cfg.Engine.BlockSize != 32:
		t.Errorf("block_size %d: the file should win over the preset", cfg.Engine.BlockSize)
	case cfg.Engine.KVCacheTokens != 8192:
		t.Errorf("kv_cache_tokens %d: the preset's should stay", cfg.Engine.KVCacheTokens)
	case cfg.Mode != sim.ModeFixed || cfg.ITL != 3*time.Millisecond:
		t.Errorf("mode %s itl %v: --itl should imply fixed mode", cfg.Mode, cfg.ITL)
	}
	if cfg, _, _, _ := parseSimFlags([]string{"--itl", "3ms", "--mode", "engine"}, io.Discard); cfg.Mode != sim.ModeEngine {
		t.Errorf("an explicit --mode engine was overridden by --itl")
	}
	if _, _, _, err := parseSimFlags([]string{"--max-num-seqs", "0"}, io.Discard); err == nil {
		t.Error("invalid flag value accepted")
	}
}
