package models

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"path/filepath"
	"strings"
)

// denseLayer is a sentence-transformers Dense module: y = activation(W·x + b), W
// [out, in] as torch stores it. Embedders such as the GTR and some e5/bge variants project
// their pooled vector with one before normalizing it.
type denseLayer struct {
	in, out    int
	weight     []float32 // [out, in], row-major
	bias       []float32 // [out], or nil
	activation func(float64) float64
}

// denseConfig is a Dense module's config.json.
type denseConfig struct {
	InFeatures         int    `json:"in_features"`
	OutFeatures        int    `json:"out_features"`
	Bias               *bool  `json:"bias"`
	ActivationFunction string `json:"activation_function"`
}

// denseActivations are the activations a Dense module may name, by their torch class.
var denseActivations = map[string]func(float64) float64{
	"Identity": func(x float64) float64 { return x },
	"Tanh":     math.Tanh,
	"ReLU":     func(x float64) float64 { return max(x, 0) },
	"Sigmoid":  func(x float64) float64 { return 1 / (1 + math.Exp(-x)) },
	"GELU":     func(x float64) float64 { return 0.5 * x * (1 + math.Erf(x/math.Sqrt2)) },
}

// loadDense reads the Dense module in dir: its config.json and its weights, from
// model.safetensors (pytorch_model.bin, a pickle, is not read).
func loadDense(dir string) (*denseLayer, error) {
	var c denseConfig
	if err := readJSON(filepath.Join(dir, "config.json"), &c); err != nil {
		return nil, err
	}
	if c.InFeatures <= 0 || c.OutFeatures <= 0 {
		return nil, fmt.Errorf("%s: in_features %d and out_features %d must be positive", filepath.Join(dir, "config.json"), c.InFeatures, c.OutFeatures)
	}
	name := c.ActivationFunction[strings.LastIndex(c.ActivationFunction, ".")+1:]
	act, ok := denseActivations[name]
	if !ok {
		return nil, fmt.Errorf("%s: activation_function %q, which ortserve does not run (it runs torch.nn Identity, Tanh, ReLU, Sigmoid, GELU)", filepath.Join(dir, "config.json"), c.ActivationFunction)
	}
	bias := c.Bias == nil || *c.Bias // torch.nn.Linear's default
	names := []string{"linear.weight"}
	if bias {
		names = append(names, "linear.bias")
	}
	file := filepath.Join(dir, "model.safetensors")
	ts, err := readSafetensors(file, names...)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: no model.safetensors (ortserve does not read pytorch_model.bin): save the module with safetensors (sentence-transformers does by default)", dir)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	w := ts["linear.weight"]
	if len(w.Shape) != 2 || w.Shape[0] != c.OutFeatures || w.Shape[1] != c.InFeatures {
		return nil, fmt.Errorf("%s: linear.weight has shape %v, config.json says [%d, %d]", file, w.Shape, c.OutFeatures, c.InFeatures)
	}
	d := &denseLayer{in: c.InFeatures, out: c.OutFeatures, weight: w.Data, activation: act}
	if bias {
		b := ts["linear.bias"]
		if len(b.Shape) != 1 || b.Shape[0] != c.OutFeatures {
			return nil, fmt.Errorf("%s: linear.bias has shape %v, config.json says [%d]", file, b.Shape, c.OutFeatures)
		}
		d.bias = b.Data
	}
	return d, nil
}

// apply returns activation(W·x + b), a new slice, accumulating in float64.
func (d *denseLayer) apply(x []float32) []float32 {
	out := make([]float32, d.out)
	for i := range out {
		var acc float64
		if d.bias != nil {
			acc = float64(d.bias[i])
		}
		for j, w := range d.weight[i*d.in : (i+1)*d.in] {
			acc += float64(w) * float64(x[j])
		}
		out[i] = float32(d.activation(acc))
	}
	return out
}

// loadDenseModules loads c.Dense's modules, relative to dir, and checks that each takes
// what the one before gives.
func loadDenseModules(dir string, c Config) ([]*denseLayer, error) {
	var out []*denseLayer
	for _, p := range c.Dense {
		d, err := loadDense(filepath.Join(dir, p))
		if err != nil {
			return nil, fmt.Errorf("models: %s: dense %s: %w", c.Name, p, err)
		}
		if n := len(out); n > 0 && out[n-1].out != d.in {
			return nil, fmt.Errorf("models: %s: dense %s takes %d features, the module before it gives %d", c.Name, p, d.in, out[n-1].out)
		}
		out = append(out, d)
	}
	return out, nil
}
