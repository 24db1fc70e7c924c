//go:build cgo && ort && !race

package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Slow clients do not starve the others: 200 connections that trickle their request bodies a
// byte every 100 ms hold connections and goroutines, but not what a normal /embed needs. With
// them open, every normal request gets a 200, and their p95 stays within three times their
// p95 without them plus a quarter of the trickle's period. Without them is measured both
// before the slow clients come and after they go, and the larger counts: the machine's load
// moves within the test, and the bracket keeps the comparison to the same run. A starved
// request would wait at least one trickle period (the slow clients hold their connections
// for 1000 s) or be refused (429).
//
// --max-in-flight is set below the number of slow clients: were a request's in-flight slot
// taken before its body is read, the slow clients alone would hold every slot and the
// normal requests would get 429.
func TestTimingSlowClients(t *testing.T) {
	const (
		slow, samples = 200, 60
		trickle       = 100 * time.Millisecond // between a slow client's bytes
	)
	c := startChild(t, "--models", versionRepo(t, "minilm", "fp32"), "--device", "cpu", "--max-in-flight", "64", "--reload-interval", "0s")
	client := &http.Client{Timeout: 10 * time.Second}
	p95 := func(phase string) time.Duration {
		t.Helper()
		var took []time.Duration
		for i := range samples {
			start := time.Now()
			code, _, err := postEmbed(client, c.url, []byte(`{"inputs": "a normal request"}`))
			took = append(took, time.Since(start))
			if err != nil || code != 200 {
				t.Fatalf("%s: request %d got %d %v, want 200", phase, i, code, err)
			}
		}
		slices.Sort(took)
		return took[(len(took)*95+99)/100-1]
	}
	p95("warm-up")
	before := p95("alone")
	fds := metricValues(t, c.url, "process_open_fds")[0]

	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { close(stop); wg.Wait() }()
	for i := range slow {
		conn, err := net.Dial("tcp", strings.TrimPrefix(c.url, "http://"))
		if err != nil {
			t.Fatalf("slow client %d: %v", i, err)
		}
		const size = 10000
		if _, err := fmt.Fprintf(conn, "POST /embed HTTP/1.1\r\nHost: ortserve\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", size); err != nil {
			t.Fatalf("slow client %d: %v", i, err)
		}
		wg.Go(func() {
			defer conn.Close()
			go io.Copy(io.Discard, conn) // whatever the server answers, if it does
			tick := time.NewTicker(trickle)
			defer tick.Stop()
			for range size {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				if _, err := conn.Write([]byte(" ")); err != nil {
					return
				}
			}
		})
	}
	// Every slow client's connection accepted by the server: a descriptor each.
	waitMetrics(t, c, []string{"process_open_fds"}, func(v []float64) bool { return v[0] >= fds+slow })
	during := p95("with slow clients")
	close(stop)
	wg.Wait()
	stop = make(chan struct{}) // for the deferred close
	// Their connections closed on the server's side too, so that the next phase is alone.
	waitMetrics(t, c, []string{"process_open_fds"}, func(v []float64) bool { return v[0] <= fds })
	after := p95("alone again")

	alone := max(before, after)
	t.Logf("p95 of a normal /embed: %v alone before, %v with %d slow clients, %v alone after",
		before.Round(10*time.Microsecond), during.Round(10*time.Microsecond), slow, after.Round(10*time.Microsecond))
	if bound := 3*alone + trickle/4; during > bound {
		t.Errorf("p95 with %d slow clients is %v, over the bound %v: three times its %v alone plus a quarter of the %v trickle", slow, during, bound, alone, trickle)
	}
}
