package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strings"
	"unicode/utf8"
)

// The request checks every route shares: media type, encoding, and JSON strings.

// errNotUTF8 is decodeJSON's error for a body that is not UTF-8, or holds a \u escape of half
// a surrogate pair: text that no Unicode string can hold. The server refuses it, on every
// API alike, rather than replace it with U+FFFD as encoding/json would, silently changing
// what the model is asked.
var errNotUTF8 = errors.New("the body is not valid UTF-8 (or holds an unpaired \\u surrogate escape): send text as UTF-8")

// checkContentType accepts application/json (charset, if given, utf-8) and, on KServe's
// routes, the binary tensor extension's application/octet-stream, and no Content-Type from a
// client that is not a browser.
func checkContentType(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	mt, params, err := mime.ParseMediaType(ct)
	if err == nil && mt == "application/json" {
		if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
			return fmt.Errorf("Content-Type %q: the body must be UTF-8 JSON: send Content-Type: application/json", ct)
		}
		return nil
	}
	if err == nil && mt == "application/octet-stream" && familyOf(r) == familyKServe {
		return nil
	}
	if ct == "" && familyOf(r) == familyKServe && r.Header.Get("Origin") == "" {
		// tritonclient.http sends its infer bodies, JSON or binary, with no Content-Type.
		// A browser can too, as a "simple" cross-origin request, but then it always sends
		// Origin, which tritonclient never does.
		return nil
	}
	if ct == "" {
		return errors.New("no Content-Type: send Content-Type: application/json with a JSON body")
	}
	return fmt.Errorf("Content-Type %q is not accepted here: send Content-Type: application/json with a JSON body", ct)
}

// decodeJSON reads one JSON value into v, refusing trailing data and text that is not
// UTF-8 (errNotUTF8).
func decodeJSON(data []byte, v any) error {
	if !utf8.Valid(data) || hasLoneSurrogate(data) {
		return errNotUTF8
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(v); err != nil {
		return err
	}
	// Not dec.More(): it reports no more data before a stray ']' or '}'.
	if len(bytes.TrimLeft(data[dec.InputOffset():], " \t\r\n")) > 0 {
		return fmt.Errorf("unexpected data after the JSON body")
	}
	return nil
}

// hasLoneSurrogate reports whether JSON text holds, inside a string, a \u escape of a high
// surrogate not followed by one of a low surrogate, or of a low surrogate not preceded by
// one of a high surrogate. It reads escapes only: a body that is not JSON is decode's to
// refuse.
func hasLoneSurrogate(data []byte) bool {
	inString, pendingHigh := false, false
	for i := 0; i < len(data); i++ {
		c := data[i]
		if !inString {
			inString = c == '"'
			continue
		}
		switch c {
		case '"':
			if pendingHigh {
				return true
			}
			inString = false
			continue
		case '\\':
		default:
			if pendingHigh {
				return true
			}
			continue
		}
		if i+1 >= len(data) {
			return pendingHigh
		}
		i++
		if data[i] != 'u' {
			if pendingHigh {
				return true
			}
			continue
		}
		r, ok := hex4(data[i+1:])
		if !ok {
			return false // not JSON: decode refuses it
		}
		i += 4
		switch {
		case r >= 0xD800 && r < 0xDC00:
			if pendingHigh {
				return true
			}
			pendingHigh = true
		case r >= 0xDC00 && r < 0xE000:
			if !pendingHigh {
				return true
			}
			pendingHigh = false
		default:
			if pendingHigh {
				return true
			}
		}
	}
	return pendingHigh
}

// hex4 reads the four hex digits of a \u escape.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// stringList reads a JSON list whose every element must be a string: encoding/json would
// read a null element as "" and so answer a text nobody sent. what names the field.
func stringList(data []byte, what string) ([]string, error) {
	var raw []json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, err
	}
	out := make([]string, len(raw))
	for i, item := range raw {
		if len(item) == 0 || item[0] != '"' {
			return nil, fmt.Errorf("%s[%d] is %s, not a string: send text", what, i, jsonKind(item))
		}
		if err := json.Unmarshal(item, &out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// jsonKind names a JSON value's kind for an error message.
func jsonKind(v []byte) string {
	v = bytes.TrimSpace(v)
	if len(v) == 0 {
		return "empty"
	}
	switch v[0] {
	case 'n':
		return "null"
	case 't', 'f':
		return "a bool"
	case '[':
		return "a list"
	case '{':
		return "an object"
	case '"':
		return "a string"
	}
	return "a number"
}
