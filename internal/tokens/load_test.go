package tokens

import (
	"sync"
	"testing"
)

// TestLoadSideBySide loads tokenizers concurrently, as a simulator and a
// gateway's policy do in one process; under -race it holds that the
// library's process-wide loader is not written unsynchronised.
func TestLoadSideBySide(t *testing.T) {
	var wg sync.WaitGroup
	for _, name := range []string{CL100K, O200K, CL100K} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tk, err := Load(name)
			if err != nil || tk.Count("hello world") != 2 {
				t.Errorf("%s: %v", name, err)
			}
		}()
	}
	wg.Wait()
}
