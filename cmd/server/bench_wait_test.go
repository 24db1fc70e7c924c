//go:build cgo && ort

package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/ortserve/ortserve/models"
	"github.com/ortserve/ortserve/server"
)

// bench waits for a server whose versions measure their calibration while serving: it reads
// /info until none says measuring, and gives up with the context.
func TestBenchAwaitsCalibration(t *testing.T) {
	var reads atomic.Int32
	info := func(calibration string) server.Info {
		return server.Info{Models: []server.ModelInfo{{Name: "m", VersionStates: map[string]models.VersionState{
			"fp32": {State: "ready", ExecInfo: &models.ExecInfo{Calibration: models.CalibrationCached}},
			"int8": {State: "ready", ExecInfo: &models.ExecInfo{Calibration: calibration}},
		}}}}
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		c := models.CalibrationMeasuring
		if reads.Add(1) > 3 {
			c = models.CalibrationMeasured
		}
		json.NewEncoder(w).Encode(info(c))
	}))
	defer srv.Close()

	first, err := fetchInfo(t.Context(), srv.Client(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if got := calibrating(first); got != "m/int8" {
		t.Fatalf("calibrating(first /info) = %q; want m/int8", got)
	}
	last, err := awaitCalibration(t.Context(), srv.Client(), srv.URL, first)
	if err != nil || calibrating(last) != "" || reads.Load() != 4 {
		t.Errorf("awaited: %v, still %q, %d reads of /info; want none measuring after the 4th", err, calibrating(last), reads.Load())
	}

	reads.Store(-1000) // measuring for good
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := awaitCalibration(ctx, srv.Client(), srv.URL, first); err == nil {
		t.Error("no error waiting on a cancelled context")
	}
}
