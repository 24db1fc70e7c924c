package doccheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// MatchOutput reports whether got, a response body, has the shape of shown, the output a doc
// shows for it; nil if it has. A doc shows the output as it was once, with its numbers, cut
// where it is long; the rule holds the shape to it and lets the values change.
//
// Output that starts with { or [ is JSON, and got must be JSON of the same shape:
//   - every shown key is in got's object with the same shape, and got has no other keys,
//     unless the object shows … (or ...) where a key would go;
//   - got's array has as many elements as shown, each of its shape, unless the array shows
//     … where an element would go: then it has at least as many, and each past the shown
//     ones has the shape of one of them;
//   - a scalar is of the same type (string, number, true/false, null); its value may differ.
//
// An ellipsis runs to the end of its array or object, so "[0.1, 0.2, … 384 numbers]" is an
// array of numbers; at the end of the output it closes everything still open, so the output
// may be a prefix cut with …. Text after the whole value is a note and not read.
//
// Any other output is text: each shown line matches a line of got, its numbers standing for
// any number and … for anything.
func MatchOutput(shown string, got []byte) error {
	shown = strings.TrimSpace(shown)
	if !strings.HasPrefix(shown, "{") && !strings.HasPrefix(shown, "[") {
		return matchText(shown, string(got))
	}
	p := &shapeParser{s: shown}
	want, err := p.value()
	if err != nil {
		return fmt.Errorf("the output shown is not JSON, nor JSON cut with …: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(got))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("the response is not JSON (%w), where the doc shows JSON: %.80q", err, got)
	}
	return want.match(v, "$")
}

// shape is a JSON value as a doc shows it, the values left out.
type shape struct {
	kind   string // object, array, string, number, bool or null
	keys   []string
	fields map[string]*shape
	elems  []*shape
	open   bool // cut with …: more keys or elements may follow
}

func kindOf(v any) string {
	switch v.(type) {
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case string:
		return "string"
	case json.Number:
		return "number"
	case bool:
		return "bool"
	}
	return "null"
}

func (s *shape) match(v any, path string) error {
	if k := kindOf(v); k != s.kind {
		return fmt.Errorf("%s: the doc shows a %s, the response has a %s", path, s.kind, k)
	}
	switch v := v.(type) {
	case map[string]any:
		for _, k := range s.keys {
			got, ok := v[k]
			if !ok {
				return fmt.Errorf("%s: the doc shows the key %q, which the response does not have", path, k)
			}
			if err := s.fields[k].match(got, path+"."+k); err != nil {
				return err
			}
		}
		if !s.open {
			for _, k := range sortedKeys(v) {
				if _, ok := s.fields[k]; !ok {
					return fmt.Errorf("%s: the response has the key %q, which the doc does not show: show it, or end the object with …", path, k)
				}
			}
		}
	case []any:
		switch {
		case !s.open && len(v) != len(s.elems):
			return fmt.Errorf("%s: the doc shows %d elements, the response has %d: show them, or end the array with …", path, len(s.elems), len(v))
		case len(v) < len(s.elems):
			return fmt.Errorf("%s: the doc shows %d elements before its …, the response has %d", path, len(s.elems), len(v))
		}
		for i, e := range v {
			at := fmt.Sprintf("%s[%d]", path, i)
			if i < len(s.elems) {
				if err := s.elems[i].match(e, at); err != nil {
					return err
				}
				continue
			}
			// Past the shown elements, each has the shape of one of them.
			var err error
			for _, want := range s.elems {
				if err = want.match(e, at); err == nil {
					break
				}
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// shapeParser reads shown JSON with its ellipses.
type shapeParser struct {
	s   string
	i   int
	cut bool // an ellipsis ran to the end of the output: every open value ends there
}

func (p *shapeParser) space() {
	for p.i < len(p.s) && strings.IndexByte(" \t\r\n", p.s[p.i]) >= 0 {
		p.i++
	}
}

func (p *shapeParser) errorf(format string, args ...any) error {
	return fmt.Errorf("at %q: %s", p.s[p.i:min(len(p.s), p.i+20)], fmt.Sprintf(format, args...))
}

// ellipsis reads an ellipsis and what follows it up to its array's or object's close, or to
// the end of the output; false if there is none here.
func (p *shapeParser) ellipsis() bool {
	p.space()
	rest := p.s[p.i:]
	if !strings.HasPrefix(rest, "…") && !strings.HasPrefix(rest, "...") {
		return false
	}
	depth := 0
	for ; p.i < len(p.s); p.i++ {
		switch p.s[p.i] {
		case '"':
			for p.i++; p.i < len(p.s) && p.s[p.i] != '"'; p.i++ {
				if p.s[p.i] == '\\' {
					p.i++
				}
			}
		case '[', '{':
			depth++
		case ']', '}':
			if depth == 0 {
				p.i++
				return true
			}
			depth--
		}
	}
	p.cut = true
	return true
}

func (p *shapeParser) value() (*shape, error) {
	p.space()
	rest := p.s[p.i:]
	switch {
	case rest == "":
		return nil, errors.New("it ends where a value should be: mark a cut with …")
	case rest[0] == '{':
		return p.object()
	case rest[0] == '[':
		return p.array()
	case rest[0] == '"':
		_, err := p.str()
		return &shape{kind: "string"}, err
	case strings.HasPrefix(rest, "true"), strings.HasPrefix(rest, "false"):
		p.i += len("true")
		if rest[0] == 'f' {
			p.i++
		}
		return &shape{kind: "bool"}, nil
	case strings.HasPrefix(rest, "null"):
		p.i += len("null")
		return &shape{kind: "null"}, nil
	}
	n := len(rest) - len(strings.TrimLeft(rest, "-+0123456789.eE"))
	if n == 0 {
		return nil, p.errorf("want a JSON value")
	}
	var num json.Number
	if err := json.Unmarshal([]byte(rest[:n]), &num); err != nil {
		return nil, p.errorf("%q is not a JSON number", rest[:n])
	}
	p.i += n
	return &shape{kind: "number"}, nil
}

func (p *shapeParser) str() (string, error) {
	start := p.i
	for p.i++; p.i < len(p.s) && p.s[p.i] != '"'; p.i++ {
		if p.s[p.i] == '\\' {
			p.i++
		}
	}
	if p.i >= len(p.s) {
		p.i = start
		return "", p.errorf("the string does not end")
	}
	p.i++
	var s string
	err := json.Unmarshal([]byte(p.s[start:p.i]), &s)
	return s, err
}

// close reads what may follow a member or element: a comma, the close, or an ellipsis. It
// says whether the value ended.
func (p *shapeParser) close(s *shape, closer byte) (bool, error) {
	p.space()
	switch {
	case p.i < len(p.s) && p.s[p.i] == ',':
		p.i++
		return false, nil
	case p.i < len(p.s) && p.s[p.i] == closer:
		p.i++
		return true, nil
	case p.ellipsis():
		s.open = true
		return true, nil
	}
	return false, p.errorf("want , or %c", closer)
}

func (p *shapeParser) array() (*shape, error) {
	s := &shape{kind: "array"}
	return p.items(s, ']', func() error {
		e, err := p.value()
		if err == nil {
			s.elems = append(s.elems, e)
		}
		return err
	})
}

func (p *shapeParser) object() (*shape, error) {
	s := &shape{kind: "object", fields: map[string]*shape{}}
	return p.items(s, '}', func() error {
		p.space()
		if p.i >= len(p.s) || p.s[p.i] != '"' {
			return p.errorf("want a key in quotes")
		}
		k, err := p.str()
		if err != nil {
			return err
		}
		p.space()
		if p.i >= len(p.s) || p.s[p.i] != ':' {
			return p.errorf("want : after the key %q", k)
		}
		p.i++
		v, err := p.value()
		if err != nil {
			return err
		}
		if _, dup := s.fields[k]; dup {
			return fmt.Errorf("the key %q is shown twice", k)
		}
		s.keys = append(s.keys, k)
		s.fields[k] = v
		return nil
	})
}

// items reads an array's or object's items into s up to closer, read reading one item.
func (p *shapeParser) items(s *shape, closer byte, read func() error) (*shape, error) {
	p.i++ // the opener
	p.space()
	if p.i < len(p.s) && p.s[p.i] == closer {
		p.i++
		return s, nil
	}
	for {
		if p.ellipsis() {
			s.open = true
			return s, nil
		}
		if err := read(); err != nil {
			return nil, err
		}
		if p.cut {
			s.open = true
			return s, nil
		}
		if done, err := p.close(s, closer); done || err != nil {
			return s, err
		}
	}
}

var number = regexp.MustCompile(`^[-+]?(?:[0-9]+\.?[0-9]*(?:[eE][-+]?[0-9]+)?|\.[0-9]+|Inf|NaN)$`)

// matchText holds each shown line to a line of got: its words in order, a number for a
// number, … for any words.
func matchText(shown, got string) error {
	lines := strings.Split(got, "\n")
	for _, want := range strings.Split(shown, "\n") {
		if strings.TrimSpace(want) == "" {
			continue
		}
		var b strings.Builder
		b.WriteString(`^\s*`)
		for i, w := range strings.Fields(want) {
			if i > 0 {
				b.WriteString(`\s+`)
			}
			if number.MatchString(w) {
				b.WriteString(`[-+]?(?:[0-9.]+(?:[eE][-+]?[0-9]+)?|Inf|NaN)`)
				continue
			}
			w = strings.ReplaceAll(w, "...", "…")
			parts := strings.Split(w, "…")
			for j := range parts {
				parts[j] = regexp.QuoteMeta(parts[j])
			}
			b.WriteString(strings.Join(parts, ".*"))
		}
		b.WriteString(`\s*$`)
		re := regexp.MustCompile(b.String())
		if !slices.ContainsFunc(lines, re.MatchString) {
			return fmt.Errorf("no line of the response has the shape of %q", want)
		}
	}
	return nil
}
