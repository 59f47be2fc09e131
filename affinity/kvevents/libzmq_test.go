package kvevents_test

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/affinity/kvevents"
)

// The subscriber against libzmq itself (pyzmq, as vLLM publishes), where
// the machine has it (Debian's python3-zmq and python3-msgpack): the
// go-zeromq SUB and DEALER speak to libzmq's PUB and ROUTER, a batch lost
// on the live socket is replayed from the ROUTER, and the final state is
// the publisher's: blocks A, B, C held, D evicted.
func TestLibzmqPublisher(t *testing.T) {
	t.Parallel()
	py := ""
	for _, c := range []string{"/usr/bin/python3", "python3"} {
		if exec.Command(c, "-c", "import zmq, msgpack").Run() == nil {
			py = c
			break
		}
	}
	if py == "" {
		if os.Getenv("INFERGATE_REQUIRE_LIBZMQ") != "" {
			t.Fatal("INFERGATE_REQUIRE_LIBZMQ is set but no python3 has zmq and msgpack")
		}
		t.Skip("no python3 with zmq and msgpack (Debian: python3-zmq python3-msgpack)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "testdata/libzmq_publisher.py")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); _ = cmd.Wait() }()
	out := bufio.NewReader(stdout)
	line, err := out.ReadString('\n')
	eps := strings.Fields(line)
	if err != nil || len(eps) != 2 {
		t.Fatalf("publisher said %q: %v", line, err)
	}
	idx := kvevents.NewIndex(0)
	sub := kvevents.NewSubscriber(idx, kvevents.Config{}, slog.New(slog.DiscardHandler))
	t.Cleanup(sub.Close)
	if err := sub.Add(kvevents.Source{Backend: "vllm", Endpoint: eps[0], Replay: eps[1], Topic: "kv-events"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the first empty batch", func() bool { st, _ := sub.Stats("vllm"); return st.Batches > 0 })
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	tokens := make([]uint32, 64)
	for i := range tokens {
		tokens[i] = uint32(i)
	}
	p := kvevents.NewPrompt(tokens, 16) // A B C D
	// The index holds A, B, C once C is replayed too, before D comes and
	// goes: the scenario is over only at its last sequence number.
	line, err = out.ReadString('\n')
	last, perr := strconv.ParseUint(strings.TrimSpace(line), 10, 64)
	if err != nil || perr != nil {
		t.Fatalf("publisher's last sequence number %q: %v %v", line, err, perr)
	}
	eventually(t, "the last batch applied, A, B, C held and D evicted", func() bool {
		st, _ := sub.Stats("vllm")
		n, ok := idx.Match("vllm", &p)
		return st.LastSeq == last && ok && n == 3 && idx.Blocks("vllm") == 3
	})
	if st, _ := sub.Stats("vllm"); st.Gaps != 1 || st.Replayed != 1 || st.Rejected != 0 {
		t.Fatalf("stream counts %+v: want one gap, replayed", st)
	}
}
