package models

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The Hugging Face hub cache layout: models--org--name/{refs,snapshots,blobs}.

// HubSnapshot resolves a Hugging Face hub cache folder (models--org--name, with refs/,
// snapshots/ and blobs/) to the snapshot it serves: the one refs/main names, else the only
// one, else the newest; why says which. Any other folder is itself.
func HubSnapshot(dir string) (snapshot, why string, err error) {
	snaps := filepath.Join(dir, "snapshots")
	if !isDir(snaps) || isFile(filepath.Join(dir, hfConfig)) {
		return dir, "", nil
	}
	var main string
	if ref, err := os.ReadFile(filepath.Join(dir, "refs", "main")); err == nil {
		main = strings.TrimSpace(string(ref))
		if main != "" && filepath.Base(main) == main && main != ".." && isDir(filepath.Join(snaps, main)) {
			return filepath.Join(snaps, main), "refs/main", nil
		}
	}
	entries, err := os.ReadDir(snaps)
	if err != nil {
		return "", "", fmt.Errorf("models: %s: %w", dir, errors.Unwrap(err))
	}
	var newest string
	var newestTime int64
	n := 0
	for _, e := range entries {
		fi, err := os.Stat(filepath.Join(snaps, e.Name()))
		if err != nil || !fi.IsDir() {
			continue
		}
		n++
		if t := fi.ModTime().UnixNano(); newest == "" || t > newestTime {
			newest, newestTime = e.Name(), t
		}
	}
	switch {
	case n == 0:
		return "", "", &InferError{Dir: dir, Reason: "a Hugging Face hub cache folder without snapshots: download the model (hf download ORG/NAME) or point at a model folder"}
	case n == 1 && main == "":
		why = "the only snapshot"
	case n == 1:
		why = fmt.Sprintf("the only snapshot (refs/main names %s, which is not downloaded)", main)
	case main == "":
		why = fmt.Sprintf("the newest of %d snapshots (no refs/main)", n)
	default:
		why = fmt.Sprintf("the newest of %d snapshots (refs/main names %s, which is not downloaded)", n, main)
	}
	return filepath.Join(snaps, newest), why, nil
}
