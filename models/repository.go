package models

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
)

// Repository is every model under one root folder, loaded.
type Repository struct {
	Root   string
	models map[string]*Model
}

// OpenRepository loads every folder under root that has a model.yaml.
func OpenRepository(root string, b Backend, log *slog.Logger) (*Repository, error) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("models: model repository %s: %w: run `make models` or point --models at one", root, errors.Unwrap(err))
	}
	r := &Repository{Root: root, models: map[string]*Model{}}
	for _, e := range entries {
		dir := filepath.Join(root, e.Name())
		if !e.IsDir() {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, ConfigFile)); err != nil {
			continue
		}
		m, err := Open(dir, b, log)
		if err != nil {
			r.Close()
			return nil, err
		}
		if _, dup := r.models[m.Name()]; dup {
			m.Close()
			r.Close()
			return nil, fmt.Errorf("models: two models named %q under %s", m.Name(), root)
		}
		r.models[m.Name()] = m
		log.Info("model loaded", "model", m.Name(), "task", m.Config.Task, "versions", m.VersionNames(), "default", m.Config.DefaultVersion)
	}
	if len(r.models) == 0 {
		return nil, fmt.Errorf("models: no models in %s (folders with %s): run `make models` or point --models at a model repository", root, ConfigFile)
	}
	return r, nil
}

// Model returns a loaded model by name.
func (r *Repository) Model(name string) (*Model, error) {
	m, ok := r.models[name]
	if !ok {
		return nil, &UnknownError{Kind: ErrUnknownModel, Name: name, Known: r.Names()}
	}
	return m, nil
}

// Names lists the models, sorted.
func (r *Repository) Names() []string { return slices.Sorted(maps.Keys(r.models)) }

// First returns the first model, by name, that does task, or nil.
func (r *Repository) First(task Task) *Model {
	for _, name := range r.Names() {
		if m := r.models[name]; m.Config.Task == task {
			return m
		}
	}
	return nil
}

// Close releases every model.
func (r *Repository) Close() error {
	var errs []error
	for _, m := range r.models {
		errs = append(errs, m.Close())
	}
	return errors.Join(errs...)
}
