package calibcache_test

import (
	"crypto/sha256"
	"fmt"
	"hash"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/ortserve/ortserve/runtime"
	"github.com/ortserve/ortserve/runtime/calibcache"
)

func key() calibcache.Key {
	return calibcache.Key{
		Model: strings.Repeat("ab", 32), Provider: "CPUExecutionProvider", Machine: "amd64; a CPU", ORT: "1.29.0",
		Sessions: 1, Streams: 2, Threads: 1, MaxBatch: 32, Packed: true, Budget: 300 * time.Millisecond,
	}
}

var runs = []runtime.Observation{{Rows: 1, Cols: 16, Duration: 3 * time.Millisecond}, {Rows: 2, Cols: 16, Duration: 5 * time.Millisecond}}

// A calibration saved under a key comes back under that key only: any field of the key that
// differs is another calibration, which must be measured.
func TestRoundTrip(t *testing.T) {
	s := calibcache.Open(filepath.Join(t.TempDir(), "calibration"))
	if _, found, err := s.Load(key()); found || err != nil {
		t.Fatalf("empty store: found %v, err %v", found, err)
	}
	if err := s.Save(key(), runs); err != nil {
		t.Fatal(err)
	}
	got, found, err := s.Load(key())
	if err != nil || !found || !slices.Equal(got, runs) {
		t.Fatalf("got %v, found %v, err %v; want %v", got, found, err, runs)
	}
	for _, tc := range []struct {
		name   string
		change func(*calibcache.Key)
	}{
		{"another model file", func(k *calibcache.Key) { k.Model = strings.Repeat("cd", 32) }},
		{"another provider", func(k *calibcache.Key) { k.Provider = "CUDAExecutionProvider" }},
		{"another device", func(k *calibcache.Key) { k.DeviceID = 1 }},
		{"another machine", func(k *calibcache.Key) { k.Machine = "amd64; another CPU" }},
		{"another ONNX Runtime", func(k *calibcache.Key) { k.ORT = "1.30.0" }},
		{"other sessions", func(k *calibcache.Key) { k.Sessions = 2 }},
		{"other streams", func(k *calibcache.Key) { k.Streams = 1 }},
		{"other threads", func(k *calibcache.Key) { k.Threads = 2 }},
		{"another max batch", func(k *calibcache.Key) { k.MaxBatch = 8 }},
		{"padded", func(k *calibcache.Key) { k.Packed = false }},
		{"another budget", func(k *calibcache.Key) { k.Budget = time.Second }},
	} {
		k := key()
		tc.change(&k)
		if _, found, err := s.Load(k); found || err != nil {
			t.Errorf("%s: found %v, err %v; want none", tc.name, found, err)
		}
	}
}

// A file that is not a calibration of its key is reported and not used; saving anew replaces
// it.
func TestCorruptFile(t *testing.T) {
	dir := t.TempDir()
	s := calibcache.Open(dir)
	if err := s.Save(key(), runs); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	if len(files) != 1 {
		t.Fatalf("files %v; want one", files)
	}
	good, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, data, want string }{
		{"truncated", string(good[:len(good)/2]), "corrupt"},
		{"not JSON", "calibration", "corrupt"},
		{"unknown field", strings.Replace(string(good), `"key"`, `"extra": 1, "key"`, 1), "corrupt"},
		{"no runs", strings.Replace(string(good), `"observations"`, `"unused"`, 1), "corrupt"},
		{"a run of no rows", strings.Replace(string(good), `"rows": 1`, `"rows": 0`, 1), "a run of 0×16"},
		{"another key", strings.Replace(string(good), `"machine": "amd64; a CPU"`, `"machine": "elsewhere"`, 1), "another key"},
		{"another file format", strings.Replace(string(good), `"file_format": 2`, `"file_format": 1`, 1), "another key"},
		{"another calibration format", strings.Replace(string(good), `"calibration_format": 1`, `"calibration_format": 2`, 1), "another key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(files[0], []byte(tc.data), 0o644); err != nil {
				t.Fatal(err)
			}
			obs, found, err := s.Load(key())
			if found || obs != nil || err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("found %v, %v, err %v; want one line saying %q", found, obs, err, tc.want)
			}
			if err := s.Save(key(), runs); err != nil {
				t.Fatal(err)
			}
			if _, found, err := s.Load(key()); !found || err != nil {
				t.Errorf("after saving anew: found %v, err %v", found, err)
			}
		})
	}
}

// A folder that cannot be written is an error for Save, which the caller logs: serving goes on.
func TestSaveUnwritable(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := calibcache.Open(file).Save(key(), runs); err == nil {
		t.Error("saved into a file as if it were a folder")
	}
}

// A file's hash is its content's XXH64, remembered by path, size and modification time:
// the second call reads the store, a change of the file hashes it anew.
func TestFileHash(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "model.onnx")
	content := []byte("not really a graph")
	if err := os.WriteFile(model, content, 0o644); err != nil {
		t.Fatal(err)
	}
	s := calibcache.Open(filepath.Join(dir, "cache"))
	want := fmt.Sprintf("%016x", xxhash.Sum64(content))
	got, err := s.FileHash(model)
	if err != nil || got != want {
		t.Fatalf("hash %s, %v; want %s", got, err, want)
	}

	// The remembered hash is what the second call returns: forged, it shows.
	memos, _ := filepath.Glob(filepath.Join(dir, "cache", "files", "*.json"))
	if len(memos) != 1 {
		t.Fatalf("memos %v; want one", memos)
	}
	data, _ := os.ReadFile(memos[0])
	forged := strings.Replace(string(data), want, strings.Repeat("0", 16), 1)
	if err := os.WriteFile(memos[0], []byte(forged), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.FileHash(model); got != strings.Repeat("0", 16) {
		t.Errorf("second call hashed the file again (%s): the remembered hash was not used", got)
	}

	// A new content (and so a new modification time) is hashed anew.
	content = []byte("another graph, of another size")
	if err := os.WriteFile(model, content, 0o644); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(model, later, later); err != nil {
		t.Fatal(err)
	}
	if got, err := s.FileHash(model); err != nil || got != fmt.Sprintf("%016x", xxhash.Sum64(content)) {
		t.Errorf("after a change: %s, %v; want %016x", got, err, xxhash.Sum64(content))
	}

	if _, err := s.FileHash(filepath.Join(dir, "missing.onnx")); err == nil {
		t.Error("no error for a missing file")
	}
}

func TestMachine(t *testing.T) {
	m := calibcache.Machine()
	if m == "" || m != calibcache.Machine() {
		t.Errorf("machine %q: want a name, the same every call", m)
	}
	t.Logf("machine: %s", m)
}

// BenchmarkFileHash times what FileHash computes on a first start, XXH64 over a model-sized
// file, against SHA-256, which it used to: `go test -bench FileHash ./runtime/calibcache`.
func BenchmarkFileHash(b *testing.B) {
	content := make([]byte, 90<<20)
	for i := range content {
		content[i] = byte(i * 131)
	}
	for _, h := range []struct {
		name string
		new  func() hash.Hash
	}{{"xxh64", func() hash.Hash { return xxhash.New() }}, {"sha256", sha256.New}} {
		b.Run(h.name, func(b *testing.B) {
			b.SetBytes(int64(len(content)))
			for b.Loop() {
				d := h.new()
				d.Write(content)
				d.Sum(nil)
			}
		})
	}
}
