package runtime_test

import (
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ortserve/ortserve/runtime"
	"github.com/ortserve/ortserve/tokenize"
)

// surface is a device as a fake session sees it: what one run of rows × cols takes.
type surface func(rows, cols int) time.Duration

func msSurface(f func(r, c float64) float64) surface {
	return func(rows, cols int) time.Duration {
		return time.Duration(f(float64(rows), float64(cols)) * float64(time.Millisecond))
	}
}

// The surfaces the check against batch 1 is tried on. The planner's model has four terms
// (k0 + k1·r + k2·r·c + k3·r·c²): it can draw every one but pressureCPU, and the test also
// tells it wrong, calibrating on one surface and serving on another.
var (
	// A CPU on which rows cost what they cost alone: no fixed cost to amortize, and padding
	// is paid for.
	linearCPU = msSurface(func(r, c float64) float64 { return 0.02 + r*c*0.02 })
	// A CPU on which int8 kernels leave a large fixed cost per run: batching amortizes it.
	int8CPU = msSurface(func(r, c float64) float64 { return 3 + r*c*0.008 })
	// A CPU on which a run costs more than linearly in its length (attention's c²) and rows
	// together cost more than alone (cache pressure): batching never pays, and by how much
	// it loses is a factor the model has no term for.
	pressureCPU = msSurface(func(r, c float64) float64 {
		return 0.2 + r*(c*0.015+c*c*0.00008)*(1+0.1*(r-1))
	})
	// A GPU: a run's fixed cost dominates.
	flatGPU = msSurface(func(r, c float64) float64 { return 2 + r*c*0.0003 })
)

// A server must never serve slower per text than batch 1 would have on its device, whatever
// its calibration said: on every surface, at a light, a medium and a saturating load, the
// session time per text of the batches formed is at most batch 1's (the mean of cost(1, len)
// over the texts served) plus a tolerance. The tolerance, 10%, is the check's margin
// (checkMargin: a class within it of batch 1 is kept, as no faded estimate on a real device
// tells them apart), which also covers what learning and the tries of stopped classes cost:
// a few batches of each class before it is judged, and at most 1/32 of the texts after.
//
// Where batching pays (the GPU, and int8's fixed cost) it must be used, over 1.5× batch 1 at
// the saturating load, and no class stopped. "calibration lies" calibrates on the GPU and
// serves on pressureCPU, as if the device had changed under the server: the planner,
// trusting the fit, forms batches, and the check must stop it (without it, this test fails
// there).
func TestBatchesNeverLoseToBatchOne(t *testing.T) {
	const tolerance = 0.10
	for _, sf := range []struct {
		name             string
		calibrate, serve surface
		packed           bool
		pays             bool // batching pays on the device
		lies             bool // calibration measured another device
	}{
		{"linear cpu", linearCPU, linearCPU, false, false, false},
		{"linear cpu, packed", linearCPU, linearCPU, true, false, false},
		{"int8 cpu", int8CPU, int8CPU, false, true, false},
		{"int8 cpu, packed", int8CPU, int8CPU, true, true, false},
		{"attention and cache pressure", pressureCPU, pressureCPU, false, false, false},
		{"attention and cache pressure, packed", pressureCPU, pressureCPU, true, false, false},
		{"flat gpu", flatGPU, flatGPU, false, true, false},
		{"flat gpu, packed", flatGPU, flatGPU, true, true, false},
		{"calibration lies", flatGPU, pressureCPU, false, false, true},
		{"calibration lies, packed", flatGPU, pressureCPU, true, false, true},
	} {
		for _, load := range []struct {
			name string
			rho  float64 // offered load, of batch 1's capacity
		}{{"light", 0.3}, {"medium", 0.8}, {"saturating", 4}} {
			t.Run(sf.name+"/"+load.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					r := offerTexts(t, sf.calibrate, sf.serve, sf.packed, load.rho, 1000)
					gain := r.batch1 / r.perText
					t.Logf("per text %.3f ms against batch 1's %.3f ms (gain %.2f×), %d texts served, %d refused, mean batch %.1f rows, %d fallbacks",
						r.perText, r.batch1, gain, r.texts, r.refused, float64(r.texts)/float64(r.runs), r.check.Fallbacks)
					if r.perText > (1+tolerance)*r.batch1 {
						t.Errorf("%.3f ms of session time a text, over batch 1's %.3f ms by more than %.0f%%", r.perText, r.batch1, 100*tolerance)
					}
					if sf.pays && (r.check.Fallbacks > 0 || load.rho > 1 && gain < 1.5) {
						t.Errorf("batching gained %.2f×, want over 1.5× at saturation and no class stopped: %+v", gain, r.check)
					}
					if sf.lies && load.rho > 0.5 && !slices.ContainsFunc(r.check.Classes, func(c runtime.ClassCheck) bool { return !c.Allowed && c.VsBatch1 > 1.1 }) {
						t.Errorf("no class stopped for measuring dearer than batch 1: %+v", r.check)
					}
				})
			})
		}
	}
}

// offered is what offerTexts measured: the session time per text served and batch 1's on the
// same texts, in milliseconds.
type offered struct {
	perText, batch1 float64
	texts, refused  int
	runs            int
	check           runtime.BatchCheck
}

// offerTexts calibrates a batcher of one session on calibrate, then offers it n one-text
// requests as a Poisson process at rho of batch 1's capacity on serve (half short texts of
// bench's lengths, half passages of about 180 tokens), and measures the session time the
// served texts took. Call it inside a synctest bubble.
func offerTexts(t *testing.T, calibrate, serve surface, packed bool, rho float64, n int) offered {
	t.Helper()
	var (
		serving atomic.Bool
		mu      sync.Mutex
		busy    time.Duration
		runs    int
	)
	cost := func(rows, cols int) time.Duration {
		if !serving.Load() {
			return calibrate(rows, cols)
		}
		d := serve(rows, cols)
		mu.Lock()
		busy += d
		runs++
		mu.Unlock()
		return d
	}
	var s runtime.Session = &fakeSession{cost: cost}
	if packed {
		s = &packingSession{fakeSession{cost: cost}}
	}
	pool := runtime.NewPool([]runtime.Session{s})
	if err := pool.Calibrate(t.Context(), runtime.CalibrationBatches(32, packed), time.Hour); err != nil {
		t.Fatal(err)
	}
	serving.Store(true)
	c := runtime.DefaultBatchConfig()
	c.Packing = packed
	b := runtime.NewBatcher(c, pool, nil)
	rng := rand.New(rand.NewPCG(5, 6))
	lens := make([]int, n)
	var mean time.Duration
	for i := range lens {
		lens[i] = builtinLengths[rng.IntN(len(builtinLengths))]
		if i%2 == 1 {
			lens[i] = 160 + rng.IntN(41)
		}
		mean += serve(1, lens[i])
	}
	mean /= time.Duration(n)
	var (
		wg     sync.WaitGroup
		served []int
	)
	for i, l := range lens {
		time.Sleep(time.Duration(rng.ExpFloat64() * float64(mean) / rho))
		wg.Go(func() {
			_, _, err := b.Execute(t.Context(), []tokenize.Encoding{enc(int64(i), l)})
			mu.Lock()
			defer mu.Unlock()
			var oe *runtime.OverloadError
			switch {
			case err == nil:
				served = append(served, l)
			case errors.As(err, &oe):
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	b.Close()
	var one time.Duration
	for _, l := range served {
		one += serve(1, l)
	}
	return offered{
		perText: busy.Seconds() * 1e3 / float64(len(served)), batch1: one.Seconds() * 1e3 / float64(len(served)),
		texts: len(served), refused: n - len(served), runs: runs, check: b.State().Check,
	}
}
