package main

import (
	"bufio"
	"bytes"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// SIGTERM while requests are in flight: every request the server admitted gets its full
// answer, and the process exits 0.
func TestSIGTERMFinishesRequestsInFlight(t *testing.T) {
	cmd := exec.CommandContext(t.Context(), os.Args[0], "serve", "--addr", "127.0.0.1:0", "--device", "cpu", "--grace", "60s")
	cmd.Env = append(os.Environ(), "ORTSERVE_TEST_EXEC=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("server did not start: %v\n%s", err, stderr.String())
	}
	url := strings.TrimSpace(line[strings.Index(line, "http://"):])

	// 8 clients, each one request of 8 long texts: together a few seconds of CPU work.
	body := `{"inputs": [` + strings.TrimSuffix(strings.Repeat(`"`+strings.Repeat("the server keeps working while it drains ", 12)+`",`, 8), ",") + `]}`
	var wg sync.WaitGroup
	codes := make(chan int, 8)
	for range 8 {
		wg.Go(func() {
			resp, err := http.Post(url+"/embed", "application/json", strings.NewReader(body))
			if err != nil {
				codes <- -1 // refused: never admitted
				return
			}
			defer resp.Body.Close()
			var buf bytes.Buffer
			buf.ReadFrom(resp.Body)
			if resp.StatusCode == 200 && !bytes.HasSuffix(bytes.TrimSpace(buf.Bytes()), []byte("]]")) {
				t.Errorf("truncated answer: %d bytes", buf.Len())
			}
			codes <- resp.StatusCode
		})
	}
	time.Sleep(300 * time.Millisecond) // let the requests be admitted
	cmd.Process.Signal(syscall.SIGTERM)
	wg.Wait()
	close(codes)
	ok := 0
	for c := range codes {
		switch c {
		case 200:
			ok++
		case -1:
		default:
			t.Errorf("an admitted request got %d", c)
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("exit: %v\n%s", err, stderr.String())
	}
	if ok == 0 {
		t.Error("no request was in flight at SIGTERM: the test proves nothing")
	}
	t.Logf("%d requests in flight at SIGTERM all answered", ok)
}
