// Package calibcache keeps model versions' calibrations on disk, so that a restart of the same
// version on the same machine seeds its cost model from the file instead of measuring it again
// (runtime.Pool.Seed). A calibration is keyed by everything that decides what it measures: the
// ONNX file's content, the device and machine, the sessions and threads, the ONNX Runtime
// version and the calibration's own format. A file that cannot be read, or that holds another
// key, is reported and left for the caller to measure anew and overwrite: never fatal.
//
// It knows nothing of ONNX Runtime: it builds and tests without cgo.
package calibcache

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/ortserve/ortserve/runtime"
)

// fileFormat is the version of the files this package writes; a file of another is not read.
// 2: files keyed by XXH64 rather than SHA-256.
const fileFormat = 2

// maxObservations bounds what a file may hold: a calibration is a few dozen runs, so more is a
// file that is not one.
const maxObservations = 4096

// Key is everything that decides what a version's calibration measures. Two versions with the
// same key measure the same curve, up to noise.
type Key struct {
	// Model is the XXH64 of the ONNX file (FileHash), hex: a changed graph, or its weights
	// quantized anew, is another model even under the same name and size.
	Model    string `json:"model_xxh64"`
	Provider string `json:"provider"`
	DeviceID int    `json:"device_id"`
	// Machine is the processor and accelerators that ran the calibration (Machine).
	Machine string `json:"machine"`
	ORT     string `json:"ort"`
	// Sessions are the graphs loaded and Streams the runs at once over them; Threads are each
	// session's intra-op threads.
	Sessions int `json:"sessions"`
	Streams  int `json:"streams"`
	Threads  int `json:"threads"`
	// MaxBatch and Packed decide the shapes measured (runtime.CalibrationBatches), and Budget
	// how many of them.
	MaxBatch int           `json:"max_batch"`
	Packed   bool          `json:"packed"`
	Budget   time.Duration `json:"budget_ns"`
	// File and Calibration are the formats of the file and of the runs it holds
	// (runtime.CalibrationFormat); Store sets them.
	File        int `json:"file_format"`
	Calibration int `json:"calibration_format"`
}

// Store is a folder of calibrations and of the hashes of the model files they are keyed by.
type Store struct{ dir string }

// Open returns the store in dir; the folder is made when the first file is written.
func Open(dir string) *Store { return &Store{dir: dir} }

// Dir is the store's folder.
func (s *Store) Dir() string { return s.dir }

// entry is a calibration file.
type entry struct {
	Key          Key                   `json:"key"`
	Observations []runtime.Observation `json:"observations"`
}

// stamped is k with the formats this build reads and writes.
func stamped(k Key) Key {
	k.File, k.Calibration = fileFormat, runtime.CalibrationFormat
	return k
}

// path is where k's calibration lives: a file named by k's hash, so that a key changes the
// name and no two keys share a file.
func (s *Store) path(k Key) string {
	data, _ := json.Marshal(k) // a struct of plain fields: never fails
	sum := sha256.Sum256(data)
	return filepath.Join(s.dir, hex.EncodeToString(sum[:16])+".json")
}

// Load returns the calibration stored under k. found is false when there is none; err, when
// there was a file for k that is not one (unreadable, corrupt, another key), says why it was
// not used: the caller measures anew, and Save overwrites it.
func (s *Store) Load(k Key) (obs []runtime.Observation, found bool, err error) {
	k = stamped(k)
	path := s.path(k)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("calibcache: %w", err)
	}
	var e entry
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		return nil, false, fmt.Errorf("calibcache: %s is corrupt: %w", path, err)
	}
	if e.Key != k {
		return nil, false, fmt.Errorf("calibcache: %s holds the calibration of another key", path)
	}
	if len(e.Observations) == 0 || len(e.Observations) > maxObservations {
		return nil, false, fmt.Errorf("calibcache: %s is corrupt: %d runs", path, len(e.Observations))
	}
	for _, o := range e.Observations {
		if o.Rows < 1 || o.Cols < 1 || o.Duration <= 0 {
			return nil, false, fmt.Errorf("calibcache: %s is corrupt: a run of %d×%d in %v", path, o.Rows, o.Cols, o.Duration)
		}
	}
	return e.Observations, true, nil
}

// Save stores obs under k, replacing what was there. The file is written whole and renamed
// into place, so that a reader never sees half of it, whatever process writes beside it.
func (s *Store) Save(k Key, obs []runtime.Observation) error {
	k = stamped(k)
	data, err := json.MarshalIndent(entry{Key: k, Observations: obs}, "", " ")
	if err != nil {
		return fmt.Errorf("calibcache: %w", err)
	}
	return s.write(s.path(k), data)
}

// write puts data at path, atomically.
func (s *Store) write(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return fmt.Errorf("calibcache: %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return fmt.Errorf("calibcache: %w", err)
	}
	_, werr := f.Write(append(data, '\n'))
	if err := errors.Join(werr, f.Close()); err != nil {
		return errors.Join(fmt.Errorf("calibcache: writing %s: %w", path, err), os.Remove(f.Name()))
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return errors.Join(fmt.Errorf("calibcache: %w", err), os.Remove(f.Name()))
	}
	return nil
}

// hashed is the remembered hash of a file, valid while the file keeps its path, size and
// modification time.
type hashed struct {
	Path    string `json:"path"`
	Size    int64  `json:"size"`
	ModTime int64  `json:"mtime_ns"`
	Sum     string `json:"xxh64"`
}

// FileHash is the XXH64 of the file at path, hex. It tells contents apart, as a cache key
// needs; a cryptographic hash would guard against forged files too, which a cache that anyone
// who can write it could fill with any calibration does not need, and SHA-256 takes several
// times as long (BenchmarkFileHash) at every first start of every version. Hashing a model's
// hundreds of megabytes still takes a while, so the hash is remembered in the store, keyed by
// the file's path, size and modification time, and read back while those stay the same; any
// change hashes the file anew. It fails only if the file cannot be read; not remembering is
// not a failure.
func (s *Store) FileHash(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("calibcache: %w", err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return "", fmt.Errorf("calibcache: %w", err)
	}
	want := hashed{Path: abs, Size: fi.Size(), ModTime: fi.ModTime().UnixNano()}
	name := sha256.Sum256([]byte(abs))
	memo := filepath.Join(s.dir, "files", hex.EncodeToString(name[:16])+".json")
	if data, err := os.ReadFile(memo); err == nil {
		var got hashed
		if json.Unmarshal(data, &got) == nil && got.Sum != "" {
			sum := got.Sum
			got.Sum = ""
			if got == want {
				return sum, nil
			}
		}
	}
	sum, err := hashFile(abs)
	if err != nil {
		return "", err
	}
	want.Sum = sum
	if data, err := json.Marshal(want); err == nil {
		_ = s.write(memo, data) // not remembered: hashed again next time, no harm
	}
	return sum, nil
}

func hashFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("calibcache: %w", err)
	}
	defer f.Close()
	h := xxhash.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("calibcache: hashing %s: %w", path, err)
	}
	return fmt.Sprintf("%016x", h.Sum64()), nil
}

// Machine names the processor and the NVIDIA GPUs of this machine, as Linux reports them
// (/proc/cpuinfo, /proc/driver/nvidia), for a Key: a calibration taken on one kind of
// machine says nothing of another, as when a cache folder on a shared volume follows a pod to
// another node. Where Linux does not say, it is the architecture alone.
func Machine() string {
	parts := []string{goruntime.GOARCH}
	if cpu := firstValue("/proc/cpuinfo", "model name"); cpu != "" {
		parts = append(parts, cpu)
	}
	infos, _ := filepath.Glob("/proc/driver/nvidia/gpus/*/information")
	var gpus []string
	for _, p := range infos {
		if g := firstValue(p, "Model"); g != "" {
			gpus = append(gpus, g)
		}
	}
	slices.Sort(gpus)
	return strings.Join(append(parts, gpus...), "; ")
}

// firstValue is the value of the first "name : value" line of the file at path; "" without.
func firstValue(path, name string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == name {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
