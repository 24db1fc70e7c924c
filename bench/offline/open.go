package offline

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"time"

	"github.com/ortserve/ortserve/bench"
	"github.com/ortserve/ortserve/models"
	"github.com/ortserve/ortserve/runtime"
	"github.com/ortserve/ortserve/tokenize"
)

// Loader opens what a rig measures, as serve would open it: runtime/engine's Engine.
type Loader interface {
	// Device is where versions run: "cpu" or "cuda".
	Device() string
	// Sessions is how many sessions a version gets unless its config says otherwise.
	Sessions() int
	Tokenizer(path string, maxLen int) (tokenize.Tokenizer, error)
	// OpenSessions opens n warmed-up sessions of an ONNX file, reading output.
	OpenSessions(ctx context.Context, path, output string, n int) ([]runtime.Session, error)
}

// Open reads the config of the model folder dir (model.yaml, or inferred as serve infers
// it), tokenizes texts (cut at the config's max length), and opens and warms up the sessions
// serve would run version on ("": the config's default version), on l.
func Open(ctx context.Context, l Loader, dir, version string, texts []string) (*Rig, error) {
	if len(texts) == 0 {
		return nil, ErrNoTexts
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cfg, vc, err := versionOf(l, dir, version)
	if err != nil {
		return nil, err
	}
	version = cmp.Or(version, cfg.DefaultVersion)
	tok, err := l.Tokenizer(filepath.Join(dir, cfg.Tokenizer), cfg.MaxLength)
	if err != nil {
		return nil, fmt.Errorf("offline: %s: tokenizer: %w", cfg.Name, err)
	}
	encs, err := tok.Encode(texts, tokenize.Options{Truncate: true})
	tok.Close()
	if err != nil {
		return nil, fmt.Errorf("offline: %s: %w", cfg.Name, err)
	}
	sessions, err := l.OpenSessions(ctx, filepath.Join(dir, vc.File), cfg.Output, cmp.Or(cfg.Instances, l.Sessions()))
	if err != nil {
		return nil, fmt.Errorf("offline: %s/%s: %w", cfg.Name, version, err)
	}
	return &Rig{Sessions: sessions, Encodings: encs}, nil
}

// LimitOf measures the physical limit of one version of the model in dir (Limit), with the
// sessions and threads serve would give it on l. Each batch size runs for per.
func LimitOf(ctx context.Context, l Loader, dir, version string, texts []string, batches []int, per time.Duration) ([]bench.OfflinePoint, error) {
	return Limit(ctx, func(ctx context.Context) (*Rig, error) { return Open(ctx, l, dir, version, texts) }, batches, per)
}

// versionOf reads the config of the model folder dir and the config of version ("": the
// default), which must run on l's device.
func versionOf(l Loader, dir, version string) (models.Config, models.VersionConfig, error) {
	cfg, err := models.LoadConfig(dir, slog.New(slog.DiscardHandler))
	if err != nil {
		return cfg, models.VersionConfig{}, err
	}
	version = cmp.Or(version, cfg.DefaultVersion)
	vc, ok := cfg.Versions[version]
	if !ok {
		return cfg, vc, &models.UnknownError{Kind: models.ErrUnknownVersion, Name: cfg.Name + "/" + version, Known: slices.Sorted(maps.Keys(cfg.Versions))}
	}
	if !vc.RunsOn(l.Device()) {
		return cfg, vc, fmt.Errorf("offline: %s/%s runs on %v, not %s", cfg.Name, version, vc.Devices, l.Device())
	}
	return cfg, vc, nil
}
