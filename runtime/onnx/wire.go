package onnx

// The protobuf wire reading ReadModel is built on: fields of a message in memory, and a stream
// over a file too large to hold (initializers are skipped, not read).

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"google.golang.org/protobuf/encoding/protowire"
)

// fields calls f on each field of a message held in memory: v for length-delimited fields,
// x for varints and fixed-size ones.
func fields(b []byte, f func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		case protowire.Fixed32Type:
			var x32 uint32
			x32, n = protowire.ConsumeFixed32(b)
			x = uint64(x32)
		case protowire.Fixed64Type:
			x, n = protowire.ConsumeFixed64(b)
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if err := f(num, typ, v, x); err != nil {
			return err
		}
	}
	return nil
}

// stream reads one protobuf message from a reader without holding it in memory, so that a
// model's weights are read past. left is the message's bytes not yet read. When src, the
// reader under r, can seek (a file), a value longer than what r holds is skipped by seeking:
// every session a server opens reads a signature, and reading a model's weights through r's
// buffer costs many times what seeking past them does (BenchmarkReadModel;
// docs/performance.md, "Figures behind constants").
type stream struct {
	r    *bufio.Reader
	src  io.ReadSeeker // nil: r is read through
	left int64
}

var errTruncated = errors.New("truncated")

// next reads a field's tag; ok is false at the message's end.
func (s *stream) next() (num protowire.Number, typ protowire.Type, ok bool, err error) {
	if s.left <= 0 {
		return 0, 0, false, nil
	}
	t, err := s.varint()
	if err != nil {
		return 0, 0, false, err
	}
	num, typ = protowire.DecodeTag(t)
	if num < protowire.MinValidNumber || num > protowire.MaxValidNumber {
		return 0, 0, false, errors.New("bad field number")
	}
	return num, typ, true, nil
}

func (s *stream) varint() (uint64, error) {
	var x uint64
	for i := 0; ; i++ {
		if s.left <= 0 || i == binary.MaxVarintLen64 {
			return 0, errTruncated
		}
		c, err := s.r.ReadByte()
		if err != nil {
			return 0, errTruncated
		}
		s.left--
		x |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			return x, nil
		}
	}
}

// length reads a length-delimited field's length.
func (s *stream) length() (int64, error) {
	n, err := s.varint()
	if err != nil {
		return 0, err
	}
	if n > uint64(s.left) {
		return 0, errTruncated
	}
	return int64(n), nil
}

// bytes reads a length-delimited field into memory: for the small messages only.
func (s *stream) bytes() ([]byte, error) {
	n, err := s.length()
	if err != nil {
		return nil, err
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(s.r, b); err != nil {
		return nil, errTruncated
	}
	s.left -= n
	return b, nil
}

// sub returns a length-delimited field as a stream of its own. It is read to its end (or
// abandoned with an error) before s is read again.
func (s *stream) sub() (*stream, error) {
	n, err := s.length()
	if err != nil {
		return nil, err
	}
	s.left -= n
	return &stream{r: s.r, src: s.src, left: n}, nil
}

// skip reads past a field's value.
func (s *stream) skip(typ protowire.Type) error {
	var n int64
	switch typ {
	case protowire.VarintType:
		_, err := s.varint()
		return err
	case protowire.Fixed32Type:
		n = 4
	case protowire.Fixed64Type:
		n = 8
	case protowire.BytesType:
		var err error
		if n, err = s.length(); err != nil {
			return err
		}
	default: // groups: not in onnx.proto
		return fmt.Errorf("unexpected wire type %d", typ)
	}
	if n > s.left {
		return errTruncated
	}
	if err := s.discard(n); err != nil {
		return errTruncated
	}
	s.left -= n
	return nil
}

// discard reads or seeks past the next n bytes.
func (s *stream) discard(n int64) error {
	held := int64(s.r.Buffered())
	if s.src == nil || n <= held {
		_, err := s.r.Discard(int(n))
		return err
	}
	if _, err := s.r.Discard(int(held)); err != nil {
		return err
	}
	// Seeking past the end is allowed: the next read then fails as truncated.
	if _, err := s.src.Seek(n-held, io.SeekCurrent); err != nil {
		return err
	}
	s.r.Reset(s.src)
	return nil
}
