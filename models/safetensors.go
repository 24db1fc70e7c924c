package models

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
)

// safetensors is Hugging Face's weight file: an 8-byte little-endian header length, a JSON
// header naming each tensor's dtype, shape and byte range in the data that follows, then the
// data, little-endian and packed. Only what a Dense module holds is read: float tensors
// (F32, F16, BF16), returned as float32.

// maxSafetensorsHeader bounds the JSON header read into memory: the format's own limit.
const maxSafetensorsHeader = 100 << 20

// floatTensor is one tensor read from a safetensors file, as float32 in row-major order.
type floatTensor struct {
	Shape []int
	Data  []float32
}

// safetensorsEntry is one tensor's header entry.
type safetensorsEntry struct {
	DType   string   `json:"dtype"`
	Shape   []int    `json:"shape"`
	Offsets [2]int64 `json:"data_offsets"`
}

// readSafetensors reads the named tensors of the safetensors file at path; a name it lacks
// is an error.
func readSafetensors(path string, names ...string) (map[string]floatTensor, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	return parseSafetensors(f, st.Size(), names...)
}

// parseSafetensors reads the named tensors from r, a safetensors file of size bytes.
func parseSafetensors(r io.ReaderAt, size int64, names ...string) (map[string]floatTensor, error) {
	var n [8]byte
	if _, err := r.ReadAt(n[:], 0); err != nil {
		return nil, errors.New("not a safetensors file: shorter than its 8-byte header length")
	}
	hlen := binary.LittleEndian.Uint64(n[:])
	if hlen > maxSafetensorsHeader || int64(hlen) > size-8 {
		return nil, fmt.Errorf("not a safetensors file: a header of %d bytes in a file of %d", hlen, size)
	}
	header := make([]byte, hlen)
	if _, err := r.ReadAt(header, 8); err != nil {
		return nil, fmt.Errorf("reading the safetensors header: %w", err)
	}
	var entries map[string]json.RawMessage
	if err := json.Unmarshal(header, &entries); err != nil {
		return nil, fmt.Errorf("the safetensors header is not a JSON object: %w", err)
	}
	dataStart, dataSize := 8+int64(hlen), size-8-int64(hlen)
	out := make(map[string]floatTensor, len(names))
	for _, name := range names {
		raw, ok := entries[name]
		if !ok || name == "__metadata__" {
			have := make([]string, 0, len(entries))
			for k := range entries {
				if k != "__metadata__" {
					have = append(have, k)
				}
			}
			slices.Sort(have)
			return nil, fmt.Errorf("no tensor %q (it has %v)", name, have)
		}
		var e safetensorsEntry
		if err := json.Unmarshal(raw, &e); err != nil {
			return nil, fmt.Errorf("tensor %q: %w", name, err)
		}
		t, err := readFloatTensor(r, dataStart, dataSize, e)
		if err != nil {
			return nil, fmt.Errorf("tensor %q: %w", name, err)
		}
		out[name] = t
	}
	return out, nil
}

func readFloatTensor(r io.ReaderAt, dataStart, dataSize int64, e safetensorsEntry) (floatTensor, error) {
	width := map[string]int64{"F32": 4, "F16": 2, "BF16": 2}[e.DType]
	if width == 0 {
		return floatTensor{}, fmt.Errorf("dtype %s: only F32, F16 and BF16 are read", e.DType)
	}
	count := int64(1)
	for _, d := range e.Shape {
		if d < 0 || (d > 0 && count > dataSize/int64(d)) {
			return floatTensor{}, fmt.Errorf("shape %v does not fit the file", e.Shape)
		}
		count *= int64(d)
	}
	begin, end := e.Offsets[0], e.Offsets[1]
	if begin < 0 || end < begin || end > dataSize || end-begin != count*width {
		return floatTensor{}, fmt.Errorf("data_offsets %v do not hold a %s tensor of shape %v in %d bytes of data", e.Offsets, e.DType, e.Shape, dataSize)
	}
	buf := make([]byte, end-begin)
	if _, err := r.ReadAt(buf, dataStart+begin); err != nil {
		return floatTensor{}, err
	}
	data := make([]float32, count)
	for i := range data {
		switch e.DType {
		case "F32":
			data[i] = math.Float32frombits(binary.LittleEndian.Uint32(buf[4*i:]))
		case "F16":
			data[i] = float16(binary.LittleEndian.Uint16(buf[2*i:]))
		case "BF16":
			data[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(buf[2*i:])) << 16)
		}
	}
	return floatTensor{Shape: slices.Clone(e.Shape), Data: data}, nil
}

// float16 widens an IEEE 754 half-precision value.
func float16(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	frac := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // inf, NaN
		return math.Float32frombits(sign | 0xff<<23 | frac<<13)
	case exp == 0 && frac == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal: a normal float32
		v := float32(frac) / (1 << 24)
		if sign != 0 {
			return -v
		}
		return v
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | frac<<13)
}
