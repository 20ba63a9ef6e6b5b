package chtype

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrShort is returned when a row ends inside a value.
var ErrShort = errors.New("row ends inside a value")

// Bounds on one value of module output, so that a length prefix cannot make
// the host reserve more than the row could hold.
const (
	MaxStringLen = 1 << 30 // bytes of one String
	MaxArrayLen  = 1 << 24 // elements of one Array, entries of one Map
)

// Check checks a value of a fixed-width type, the first Width() bytes of v:
// a Bool is 0 or 1 and an enum value is declared. Other kinds take any bytes.
func (t *Type) Check(v []byte) error {
	switch t.Kind {
	case Bool:
		if v[0] > 1 {
			return fmt.Errorf("Bool value %d is neither 0 nor 1", v[0])
		}
	case Enum8:
		if !t.HasEnum(int16(int8(v[0]))) {
			return fmt.Errorf("enum value %d is not declared", int8(v[0]))
		}
	case Enum16:
		if e := int16(binary.LittleEndian.Uint16(v)); !t.HasEnum(e) {
			return fmt.Errorf("enum value %d is not declared", e)
		}
	}
	return nil
}

// Checked reports whether Check can refuse a value of the type.
func (t *Type) Checked() bool { return t.Kind == Bool || t.Kind == Enum8 || t.Kind == Enum16 }

// NullFlag reads the flag that starts a Nullable value: whether it is NULL.
func NullFlag(b []byte) (bool, error) {
	if len(b) < 1 {
		return false, ErrShort
	}
	if b[0] > 1 {
		return false, fmt.Errorf("Nullable flag %d is neither 0 nor 1", b[0])
	}
	return b[0] == 1, nil
}

// StringLen returns the size of the String value at the front of b, its
// length prefix included.
func StringLen(b []byte) (int, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > MaxStringLen || n > uint64(len(b)-k) {
		return 0, ErrShort
	}
	return k + int(n), nil
}

// Count reads how many times an Array, Map or Tuple value repeats its Seq
// (a Tuple once) and the size of its prefix, refusing a count that the rest
// of b cannot hold.
func (t *Type) Count(b []byte) (n, prefix int, err error) {
	if t.Kind == Tuple {
		return 1, 0, nil
	}
	c, k := binary.Uvarint(b)
	if k <= 0 {
		return 0, 0, ErrShort
	}
	if c > MaxArrayLen || c*uint64(t.least) > uint64(len(b)-k) {
		if t.Kind == Map {
			return 0, 0, fmt.Errorf("map of %d entries does not fit the row", c)
		}
		return 0, 0, fmt.Errorf("array of %d elements does not fit the row", c)
	}
	return int(c), k, nil
}

// Skip returns the size of the value at the front of b, checking it as
// decoding would.
func (t *Type) Skip(b []byte) (int, error) {
	if w := t.Width(); w > 0 {
		if len(b) < w {
			return 0, ErrShort
		}
		if t.Checked() {
			return w, t.Check(b)
		}
		return w, nil
	}
	switch t.Kind {
	case String:
		return StringLen(b)
	case Nullable:
		null, err := NullFlag(b)
		if err != nil || null {
			return 1, err
		}
		n, err := t.Elem.Skip(b[1:])
		return n + 1, err
	case Array, Map, Tuple:
		n, pos, err := t.Count(b)
		for i := 0; i < n && err == nil; i++ {
			for _, e := range t.Seq {
				var m int
				if m, err = e.Skip(b[pos:]); err != nil {
					break
				}
				pos += m
			}
		}
		return pos, err
	}
	return 0, fmt.Errorf("type %s cannot be decoded", t.Text)
}
