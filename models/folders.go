package models

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Model folders on disk: which folders are models, finding one by name, and whether one
// changed.

// ModelDir is one model folder: one with a model.yaml, or a Hugging Face model folder
// (IsHFDir) whose config is inferred. Name, when not "", is the name it is served under,
// whatever its config says.
type ModelDir struct {
	Name string
	Dir  string
}

// Sources are where a Repository finds its models.
type Sources struct {
	// Root is a folder of model folders; its other folders are skipped. "": none.
	Root string
	// Models are model folders served on their own, beside Root's.
	Models []ModelDir
}

// Find resolves the model that OpenSources would serve under name, without loading it: its
// folder and its config (Name set to the name it is served under). It lists the folders as
// OpenSources does, and reads first those named name (a folder of Root, or NAME of a
// ModelDir), so that finding a model usually reads no other config. A folder whose config
// cannot be read or inferred is known by its folder's name (or its ModelDir's Name): asking
// for it returns why. An unknown name is an *UnknownError with the names found. Two folders
// serving one name are OpenSources' error to report; Find returns the first it reads.
func Find(src Sources, name string) (dir string, cfg Config, err error) {
	r := &Repository{Root: src.Root, Models: src.Models}
	mds, err := r.modelDirs(true)
	if err != nil {
		return "", Config{}, err
	}
	type found struct {
		name string
		cfg  Config
		err  error
	}
	quiet := slog.New(slog.DiscardHandler)
	hint := func(md ModelDir) string { return cmp.Or(md.Name, filepath.Base(md.Dir)) }
	read := make([]*found, len(mds))
	for _, named := range []bool{true, false} {
		for i, md := range mds {
			if (hint(md) == name) != named {
				continue
			}
			f := &found{name: hint(md)}
			if f.cfg, f.err = LoadConfig(md.Dir, quiet); f.err == nil {
				f.cfg.Name = cmp.Or(md.Name, f.cfg.Name)
				f.name = f.cfg.Name
			}
			read[i] = f
			if f.name == name {
				return md.Dir, f.cfg, f.err
			}
		}
	}
	var known []string
	for _, f := range read {
		known = append(known, f.name)
	}
	slices.Sort(known)
	return "", Config{}, &UnknownError{Kind: ErrUnknownModel, Name: name, Known: slices.Compact(known)}
}

// skip reports whether a folder's failed load is a folder of Root without model.yaml whose
// config could not be inferred: such a folder is skipped with a log line, not an error, and
// not tried again until its files change.
func (r *Repository) skip(md ModelDir, fp string, err error) bool {
	var ie *InferError
	if !errors.As(err, &ie) || slices.Contains(r.Models, md) {
		return false
	}
	if r.refused[md.Dir] != fp {
		r.log.Warn("folder skipped: no model.yaml, and its config cannot be inferred for sure", "dir", md.Dir, "why", ie.Reason)
	}
	r.refused[md.Dir] = fp
	return true
}

// openDir loads the model in one folder, under md.Name if given.
func openDir(md ModelDir, b Backend, log *slog.Logger) (*Model, error) {
	cfg, err := LoadConfig(md.Dir, log)
	if err != nil {
		return nil, err
	}
	if md.Name != "" {
		cfg.Name = md.Name
	}
	return OpenConfig(md.Dir, cfg, b, log)
}

// modelDirs lists the model folders: Root's, then Models. strict makes a folder of Models
// that is missing or not a model folder an error (at start); otherwise it is left out, and
// Reload removes its model.
func (r *Repository) modelDirs(strict bool) ([]ModelDir, error) {
	var mds []ModelDir
	if r.Root != "" {
		entries, err := os.ReadDir(r.Root)
		if err != nil {
			return nil, fmt.Errorf("models: model repository %s: %w: run `make models` or point --models at one", r.Root, errors.Unwrap(err))
		}
		for _, e := range entries {
			dir := filepath.Join(r.Root, e.Name())
			if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
				continue
			}
			if IsModelDir(dir) {
				mds = append(mds, ModelDir{Dir: dir})
			}
		}
	}
	seen := map[string]string{}
	for _, md := range mds {
		seen[absPath(md.Dir)] = md.Dir
	}
	for _, md := range r.Models {
		if prev, dup := seen[absPath(md.Dir)]; dup && strict {
			return nil, fmt.Errorf("models: %s is given twice (as %s too): serve each model folder once", md.Dir, prev)
		} else if dup {
			continue
		}
		seen[absPath(md.Dir)] = md.Dir
		if IsModelDir(md.Dir) {
			mds = append(mds, md)
			continue
		}
		if !strict {
			continue
		}
		if fi, err := os.Stat(md.Dir); err != nil {
			return nil, fmt.Errorf("models: model folder %s: %w", md.Dir, errors.Unwrap(err))
		} else if !fi.IsDir() {
			return nil, fmt.Errorf("models: %s is not a folder: name a model folder", md.Dir)
		}
		if _, _, err := HubSnapshot(md.Dir); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("models: %s has no %s and is not a Hugging Face model folder (config.json and an .onnx file at its root or in onnx/): write a %s (docs/models.md)", md.Dir, ConfigFile, ConfigFile)
	}
	return mds, nil
}

func absPath(dir string) string {
	if abs, err := filepath.Abs(dir); err == nil {
		return abs
	}
	return filepath.Clean(dir)
}

// fingerprintFiles bounds the files fingerprint looks at, and fingerprintDepth the folders
// it goes into: a model folder is small, but may be a hub cache folder or hold data.
const (
	fingerprintFiles = 4096
	fingerprintDepth = 4
)

// fingerprint summarizes the files of a model folder and its subfolders (name, size,
// modification time, following links), so that Reload notices a change without reading the
// weights: a hub cache folder's refs/main and snapshots, an onnx/ or 1_Pooling/ folder.
// Hidden folders and a hub cache's blobs/ (which its snapshots link to) are left out.
func fingerprint(dir string) string {
	h := sha256.New()
	files := 0
	var walk func(rel string, depth int)
	walk = func(rel string, depth int) {
		entries, _ := os.ReadDir(filepath.Join(dir, rel))
		for _, e := range entries {
			if files >= fingerprintFiles {
				return
			}
			p := filepath.Join(rel, e.Name())
			fi, err := os.Stat(filepath.Join(dir, p))
			if err != nil {
				continue
			}
			if fi.IsDir() {
				if depth < fingerprintDepth && e.Name() != "blobs" && !strings.HasPrefix(e.Name(), ".") {
					walk(p, depth+1)
				}
				continue
			}
			files++
			fmt.Fprintf(h, "%s\x00%d\x00%d\n", p, fi.Size(), fi.ModTime().UnixNano())
		}
	}
	walk("", 0)
	return hex.EncodeToString(h.Sum(nil))
}
