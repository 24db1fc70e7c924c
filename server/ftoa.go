package server

import (
	"math"
	"math/bits"
)

// JSON's float32 text without strconv: on MiniLM's vectors it takes less CPU than
// strconv.AppendFloat(…, 32), which itself takes less than encoding/json
// (docs/performance.md, "Per-request overhead"). The digits
// are the shortest that read back as the same float32 and, of those, the closest to its exact
// value, as strconv's Dragonbox picks them (ties to even, except at powers of two). They come
// from Schubfach (Raffaello Giulietti, "The Schubfach way to render doubles", 2020), in the
// float32 form of Alexander Bolz's C++ (github.com/abolz/Drachennest, schubfach_32.cc), on a
// table of 77 powers of ten. encode_test.go checks the table against math/big and the output
// against encoding/json: a sample of bit patterns always, all 2^32 on request
// (TestAppendFloat32All).

// pow10Sig holds, for e in [-31, 45], 10^e's 64 leading bits plus one: ⌊10^e·2^(63−⌊log2 10^e⌋)⌋ + 1.
var pow10Sig = [...]uint64{
	0x81ceb32c4b43fcf5, 0xa2425ff75e14fc32, 0xcad2f7f5359a3b3f, 0xfd87b5f28300ca0e, // 1e-31 … 1e-28
	0x9e74d1b791e07e49, 0xc612062576589ddb, 0xf79687aed3eec552, 0x9abe14cd44753b53, // 1e-27 … 1e-24
	0xc16d9a0095928a28, 0xf1c90080baf72cb2, 0x971da05074da7bef, 0xbce5086492111aeb, // 1e-23 … 1e-20
	0xec1e4a7db69561a6, 0x9392ee8e921d5d08, 0xb877aa3236a4b44a, 0xe69594bec44de15c, // 1e-19 … 1e-16
	0x901d7cf73ab0acda, 0xb424dc35095cd810, 0xe12e13424bb40e14, 0x8cbccc096f5088cc, // 1e-15 … 1e-12
	0xafebff0bcb24aaff, 0xdbe6fecebdedd5bf, 0x89705f4136b4a598, 0xabcc77118461cefd, // 1e-11 … 1e-8
	0xd6bf94d5e57a42bd, 0x8637bd05af6c69b6, 0xa7c5ac471b478424, 0xd1b71758e219652c, // 1e-7 … 1e-4
	0x83126e978d4fdf3c, 0xa3d70a3d70a3d70b, 0xcccccccccccccccd, 0x8000000000000001, // 1e-3 … 1e0
	0xa000000000000001, 0xc800000000000001, 0xfa00000000000001, 0x9c40000000000001, // 1e1 … 1e4
	0xc350000000000001, 0xf424000000000001, 0x9896800000000001, 0xbebc200000000001, // 1e5 … 1e8
	0xee6b280000000001, 0x9502f90000000001, 0xba43b74000000001, 0xe8d4a51000000001, // 1e9 … 1e12
	0x9184e72a00000001, 0xb5e620f480000001, 0xe35fa931a0000001, 0x8e1bc9bf04000001, // 1e13 … 1e16
	0xb1a2bc2ec5000001, 0xde0b6b3a76400001, 0x8ac7230489e80001, 0xad78ebc5ac620001, // 1e17 … 1e20
	0xd8d726b7177a8001, 0x878678326eac9001, 0xa968163f0a57b401, 0xd3c21bcecceda101, // 1e21 … 1e24
	0x84595161401484a1, 0xa56fa5b99019a5c9, 0xcecb8f27f4200f3b, 0x813f3978f8940985, // 1e25 … 1e28
	0xa18f07d736b90be6, 0xc9f2c9cd04674edf, 0xfc6f7c4045812297, 0x9dc5ada82b70b59e, // 1e29 … 1e32
	0xc5371912364ce306, 0xf684df56c3e01bc7, 0x9a130b963a6c115d, 0xc097ce7bc90715b4, // 1e33 … 1e36
	0xf0bdc21abb48db21, 0x96769950b50d88f5, 0xbc143fa4e250eb32, 0xeb194f8e1ae525fe, // 1e37 … 1e40
	0x92efd1b8d0cf37bf, 0xb7abc627050305ae, 0xe596b7b0c643c71a, 0x8f7e32ce7bea5c70, // 1e41 … 1e44
	0xb35dbf821ae4f38c, // 1e45 … 1e45
}

// float32Decimal returns the shortest decimal m·10^e that reads back as the positive,
// finite float32 whose exponent and mantissa fields are exp and mant; m has no trailing zeros.
func float32Decimal(exp, mant uint32) (m uint32, e int) {
	const bias = 127 + 23 // exponent bias plus the mantissa's bits
	var c uint32
	var q int32
	if exp != 0 {
		c, q = 1<<23|mant, int32(exp)-bias
		// Small integers: the value itself is the answer.
		if q <= 0 && -q < 24 && c&(1<<uint32(-q)-1) == 0 {
			return trimDecimalZeros(c>>uint32(-q), 0)
		}
	} else {
		c, q = mant, 1-bias
	}
	even := c%2 == 0
	lowerCloser := mant == 0 && exp > 1 // at a power of two the gap below is half the gap above
	cbl := 4*c - 2
	if lowerCloser {
		cbl++
	}
	cb, cbr := 4*c, 4*c+2
	// k = ⌊log10(2^q)⌋, or ⌊log10(3/4·2^q)⌋ when the lower boundary is closer.
	k := q * 1262611
	if lowerCloser {
		k -= 524031
	}
	k >>= 22
	h := q + (-k*1741647)>>19 + 1 // q + ⌊log2 10^−k⌋ + 1
	g := pow10Sig[-k+31]
	vbl := roundToOdd(g, cbl<<uint32(h))
	vb := roundToOdd(g, cb<<uint32(h))
	vbr := roundToOdd(g, cbr<<uint32(h))
	lower, upper := vbl, vbr
	if !even {
		lower, upper = vbl+1, vbr-1
	}
	s := vb / 4
	if s >= 10 { // one digit fewer, if one of s's two neighbours at that length is inside
		sp := s / 10
		upInside := lower <= 40*sp
		wpInside := 40*sp+40 <= upper
		if upInside != wpInside {
			if wpInside {
				sp++
			}
			return trimDecimalZeros(sp, int(k)+1)
		}
	}
	uInside := lower <= 4*s
	wInside := 4*s+4 <= upper
	if uInside != wInside {
		if wInside {
			s++
		}
		return trimDecimalZeros(s, int(k))
	}
	// Both or neither inside: the closer one. Ties go to even, except at powers of two, where
	// strconv's Dragonbox rounds them up (but at q = -77, 2^-54, to even): encoding/json's
	// output is the reference, so its choice is copied.
	mid := 4*s + 2
	if vb > mid || (vb == mid && (s&1 != 0 || lowerCloser && q != -77)) {
		s++
	}
	return trimDecimalZeros(s, int(k))
}

// roundToOdd is the high 32 bits of the 96-bit g·cp, with the lowest bit set when any bit
// below them that the rounding needs is.
func roundToOdd(g uint64, cp uint32) uint32 {
	hi, lo := bits.Mul64(g, uint64(cp))
	y1, y0 := uint32(hi), uint32(lo>>32)
	if y0 > 1 {
		y1 |= 1
	}
	return y1
}

func trimDecimalZeros(m uint32, e int) (uint32, int) {
	for m%10 == 0 {
		m /= 10
		e++
	}
	return m, e
}

// appendFloat32 appends f as encoding/json writes a float32: the shortest digits (above),
// without an exponent from 1e-6 up to 1e21 and with one outside, as ES6 numbers print, and
// "e-7" rather than strconv's "e-07". NaN and the infinities are json.Marshal's error.
func appendFloat32(b []byte, f float32) ([]byte, error) {
	fb := math.Float32bits(f)
	exp, mant := fb>>23&0xff, fb&(1<<23-1)
	if exp == 0xff {
		return b, unsupportedFloat(f)
	}
	if fb>>31 != 0 {
		b = append(b, '-')
	}
	if exp == 0 && mant == 0 {
		return append(b, '0'), nil
	}
	m, e := float32Decimal(exp, mant)
	var buf [10]byte
	i := len(buf)
	for ; m >= 10; m /= 10 {
		i--
		buf[i] = byte('0' + m%10)
	}
	i--
	buf[i] = byte('0' + m)
	d := buf[i:]
	n := len(d)
	dp := n + e // the decimal point's place after d's first dp digits
	// encoding/json's cutoffs, in float32 as it compares them.
	if abs := math.Float32frombits(fb &^ (1 << 31)); abs < 1e-6 || abs >= 1e21 {
		b = append(b, d[0])
		if n > 1 {
			b = append(b, '.')
			b = append(b, d[1:]...)
		}
		b = append(b, 'e')
		x := dp - 1
		if x < 0 {
			b = append(b, '-')
			x = -x
		} else {
			b = append(b, '+')
			if x < 10 {
				b = append(b, '0') // strconv's two digits; encoding/json trims only e-0X
			}
		}
		if x >= 10 {
			b = append(b, byte('0'+x/10))
		}
		return append(b, byte('0'+x%10)), nil
	}
	switch {
	case dp <= 0:
		b = append(b, '0', '.')
		for range -dp {
			b = append(b, '0')
		}
		b = append(b, d...)
	case dp < n:
		b = append(b, d[:dp]...)
		b = append(b, '.')
		b = append(b, d[dp:]...)
	default:
		b = append(b, d...)
		for range dp - n {
			b = append(b, '0')
		}
	}
	return b, nil
}
