package tune

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/ortserve/ortserve/models"
)

// ModelEdit is how a repository overlay changes the tuned model's model.yaml. The serve
// config has no key for a model's default version or its response cache; they live in
// model.yaml, so tune changes them in a copy of the repository made of links.
type ModelEdit struct {
	Version    string // default_version
	CacheBytes int64  // cache.max_bytes; 0: no cache
	// Only keeps Version alone in the versions map (and drops traffic), so that a server
	// started for one experiment loads only what it measures.
	Only bool
}

// Overlay makes dst a model repository that serves what src serves, but with the edit
// applied to the model.yaml of the model in src's folder model (the folder's name, which may
// differ from the model's). The model's folder in dst links every file of the original
// folder except model.yaml, which is rewritten (comments and the other keys kept); with
// others, every other model folder of src (models.IsModelDir) is linked too. The original files are not touched.
// dst must not exist yet, or be empty.
func Overlay(src, dst, model string, e ModelEdit, others bool) error {
	src, err := filepath.Abs(src)
	if err != nil {
		return err
	}
	dir := filepath.Join(src, model)
	data, err := os.ReadFile(filepath.Join(dir, models.ConfigFile))
	if err != nil {
		return fmt.Errorf("tune: %w", err)
	}
	edited, err := editModelYAML(data, e)
	if err != nil {
		return fmt.Errorf("tune: %s: %w", filepath.Join(dir, models.ConfigFile), err)
	}
	out := filepath.Join(dst, model)
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, en := range entries {
		if en.Name() == models.ConfigFile {
			continue
		}
		if err := os.Symlink(filepath.Join(dir, en.Name()), filepath.Join(out, en.Name())); err != nil {
			return fmt.Errorf("tune: %w", err)
		}
	}
	//nolint:gosec // G703: dst and model are the operator's (server tune --out, the model's folder name)
	if err := os.WriteFile(filepath.Join(out, models.ConfigFile), edited, 0o644); err != nil {
		return err
	}
	if !others {
		return nil
	}
	entries, err = os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, en := range entries {
		path := filepath.Join(src, en.Name())
		if en.Name() == model {
			continue
		}
		if !models.IsModelDir(path) {
			continue
		}
		if err := os.Symlink(path, filepath.Join(dst, en.Name())); err != nil {
			return fmt.Errorf("tune: %w", err)
		}
	}
	return nil
}

// editModelYAML applies e to a model.yaml document and checks the result as serve will.
func editModelYAML(data []byte, e ModelEdit) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	if len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, errors.New("not a mapping")
	}
	root := doc.Content[0]
	setKey(root, "default_version", scalar(e.Version))
	if e.CacheBytes > 0 {
		setKey(root, "cache", mapping("max_bytes", scalar(strconv.FormatInt(e.CacheBytes, 10))))
	} else {
		deleteKey(root, "cache")
	}
	if e.Only {
		deleteKey(root, "traffic")
		if vs := getKey(root, "versions"); vs != nil && vs.Kind == yaml.MappingNode {
			var keep []*yaml.Node
			for i := 0; i+1 < len(vs.Content); i += 2 {
				if vs.Content[i].Value == e.Version {
					keep = append(keep, vs.Content[i], vs.Content[i+1])
				}
			}
			vs.Content = keep
			vs.Style = 0
		}
	}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	if _, err := models.ParseConfig(b.Bytes()); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func scalar(v string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Value: v} }

func mapping(kv ...any) *yaml.Node {
	n := &yaml.Node{Kind: yaml.MappingNode}
	for i := 0; i+1 < len(kv); i += 2 {
		n.Content = append(n.Content, scalar(kv[i].(string)), kv[i+1].(*yaml.Node))
	}
	return n
}

func getKey(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

func setKey(m *yaml.Node, key string, v *yaml.Node) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content[i+1] = v
			return
		}
	}
	m.Content = append(m.Content, scalar(key), v)
}

func deleteKey(m *yaml.Node, key string) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content = append(m.Content[:i], m.Content[i+2:]...)
			return
		}
	}
}

// Setting is one key of a serve config file ("batching.max_batch_size" for a key inside a
// section) and its value, as `server serve --config` reads it.
type Setting struct {
	Key, Value string
}

// The serve config keys of the levers that are serve settings.
const (
	KeyQueueDelay  = "batching.max_queue_delay"
	KeyMaxBatch    = "batching.max_batch_size"
	KeyBatchTokens = "batching.max_batch_tokens"
	KeySessions    = "sessions"
	KeyThreads     = "threads"
	KeyModels      = "models"
)

// ServeSettings returns base with the serve-level levers that differ between from and to
// set to to's values; settings of levers left alone keep base's values (a sessions of 0
// stays "one per core").
func ServeSettings(base []Setting, from, to Config) []Setting {
	out := append([]Setting(nil), base...)
	set := func(key, value string) {
		for i := range out {
			if out[i].Key == key {
				out[i].Value = value
				return
			}
		}
		out = append(out, Setting{key, value})
	}
	if from.MaxQueueDelay != to.MaxQueueDelay {
		set(KeyQueueDelay, to.MaxQueueDelay.String())
	}
	if from.MaxBatch != to.MaxBatch {
		set(KeyMaxBatch, strconv.Itoa(to.MaxBatch))
	}
	if from.MaxBatchTokens != to.MaxBatchTokens {
		set(KeyBatchTokens, strconv.Itoa(to.MaxBatchTokens))
	}
	if from.Sessions != to.Sessions || from.Threads != to.Threads {
		set(KeySessions, strconv.Itoa(to.Sessions))
		set(KeyThreads, strconv.Itoa(to.Threads))
	}
	return out
}

// WriteServeYAML writes settings as a serve config file: keys with a dot go inside the
// mapping named before it, in the order given; comment lines go on top. Settings with an
// empty value are left out, so that they keep serve's default.
func WriteServeYAML(w io.Writer, comment []string, settings []Setting) error {
	root := &yaml.Node{Kind: yaml.MappingNode}
	sections := map[string]*yaml.Node{}
	for _, s := range settings {
		if s.Value == "" {
			continue
		}
		m, key := root, s.Key
		if sec, k, ok := strings.Cut(s.Key, "."); ok {
			if sections[sec] == nil {
				sections[sec] = &yaml.Node{Kind: yaml.MappingNode}
				root.Content = append(root.Content, scalar(sec), sections[sec])
			}
			m, key = sections[sec], k
		}
		m.Content = append(m.Content, scalar(key), scalar(s.Value))
	}
	var head strings.Builder
	for _, c := range comment {
		head.WriteString("# " + c + "\n")
	}
	if _, err := io.WriteString(w, head.String()); err != nil {
		return err
	}
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(root); err != nil {
		return err
	}
	return enc.Close()
}
