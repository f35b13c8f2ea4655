package canon

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestNumbersTSV checks AppendFloat against testdata/numbers.tsv:
// IEEE-754 bits → expected ES6 string, or ERROR for NaN and infinities.
func TestNumbersTSV(t *testing.T) {
	f, err := os.Open("testdata/numbers.tsv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	rows := 0
	for sc.Scan() {
		fields := strings.Split(sc.Text(), "\t")
		if len(fields) < 2 {
			continue
		}
		rows++
		bits, err := strconv.ParseUint(fields[0], 16, 64)
		if err != nil {
			t.Fatalf("bad row %q: %v", sc.Text(), err)
		}
		v, want := math.Float64frombits(bits), fields[1]
		got, err := AppendFloat(nil, v)
		if want == "ERROR" {
			if !errors.Is(err, ErrNumberRange) || len(got) != 0 {
				t.Errorf("AppendFloat(%s = %v) = %q, %v; want error %v", fields[0], v, got, err, ErrNumberRange)
			}
			continue
		}
		if err != nil || string(got) != want {
			t.Errorf("AppendFloat(%s) = %q, %v; want %q", fields[0], got, err, want)
		}
		checkNumberInput(t, v, want)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if rows < 30 {
		t.Fatalf("read %d rows from numbers.tsv; want all of them", rows)
	}
}

// checkNumberInput checks that Append canonicalizes several spellings of v
// to want: want itself, and the 17-digit exponent form. Integer literals
// above 2^53 are accepted only in canonical form, so the exponent form is
// used for those.
func checkNumberInput(t *testing.T, v float64, want string) {
	t.Helper()
	var c Canonicalizer
	for _, in := range []string{
		want,
		strconv.FormatFloat(v, 'e', 16, 64),
		strconv.FormatFloat(v, 'E', -1, 64),
	} {
		got, err := c.Append(nil, []byte(in))
		if err != nil || string(got) != want {
			t.Errorf("Append(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// TestES6File checks the first 10,000 lines of the ES6 number test file.
func TestES6File(t *testing.T) {
	f, err := os.Open("testdata/es6/es6testfile100m_first10000.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	lines := 0
	for sc.Scan() {
		lines++
		hexBits, want, ok := strings.Cut(sc.Text(), ",")
		if !ok {
			t.Fatalf("line %d: bad line %q", lines, sc.Text())
		}
		bits, err := strconv.ParseUint(hexBits, 16, 64)
		if err != nil {
			t.Fatalf("line %d: %v", lines, err)
		}
		v := math.Float64frombits(bits)
		got, err := AppendFloat(nil, v)
		if err != nil || string(got) != want {
			t.Errorf("line %d: AppendFloat(%s) = %q, %v; want %q", lines, hexBits, got, err, want)
			continue
		}
		if lines%10 == 0 || lines < 200 {
			checkNumberInput(t, v, want)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if lines != 10_000 {
		t.Errorf("read %d lines; want 10000", lines)
	}
}

// TestES6Generator regenerates prefixes of the 100-million-line ES6 test
// file with the published algorithm (a list of edge cases, 2000 successive
// doubles from the smallest normal, then doubles from a SHA-256 chain) and
// compares the SHA-256 of the lines with testdata/es6/checksums.tsv.
func TestES6Generator(t *testing.T) {
	want := map[int]string{}
	for i, line := range strings.Split(string(readFile(t, "testdata/es6/checksums.tsv")), "\n") {
		fields := strings.Fields(line)
		if i == 0 || len(fields) < 2 {
			continue
		}
		n, err := strconv.Atoi(fields[0])
		if err != nil {
			t.Fatal(err)
		}
		want[n] = fields[1]
	}
	// The edge cases are the first lines of the test file, up to the
	// serial part.
	var static []uint64
	sc := bufio.NewScanner(bytes.NewReader(readFile(t, "testdata/es6/es6testfile100m_first10000.txt")))
	var prev string
	for sc.Scan() {
		h, _, _ := strings.Cut(sc.Text(), ",")
		if prev == "10000000000000" && h == "10000000000001" {
			static = static[:len(static)-1]
			break
		}
		bits, err := strconv.ParseUint(h, 16, 64)
		if err != nil {
			t.Fatal(err)
		}
		static = append(static, bits)
		prev = h
	}

	max := 1_000_000
	if testing.Short() {
		max = 10_000
	}
	var (
		idx   int
		block [sha256.Size]byte
		data  []byte
		line  []byte
		sum   = sha256.New()
	)
	next := func() float64 {
		const serial = 2000
		var v float64
		switch {
		case idx < len(static):
			v = math.Float64frombits(static[idx])
		case idx < len(static)+serial:
			v = math.Float64frombits(0x0010000000000000 + uint64(idx-len(static)))
		default:
			for v == 0 || math.IsNaN(v) || math.IsInf(v, 0) {
				if len(data) == 0 {
					block = sha256.Sum256(block[:])
					data = block[:]
				}
				v = math.Float64frombits(binary.LittleEndian.Uint64(data))
				data = data[8:]
			}
		}
		idx++
		return v
	}
	checked := 0
	for n := 1; n <= max; n++ {
		v := next()
		line = strconv.AppendUint(line[:0], math.Float64bits(v), 16)
		line = append(line, ',')
		var err error
		if line, err = AppendFloat(line, v); err != nil {
			t.Fatalf("AppendFloat(%v) error = %v", v, err)
		}
		line = append(line, '\n')
		sum.Write(line)
		if w, ok := want[n]; ok {
			checked++
			if got := hex.EncodeToString(sum.Sum(nil)); got != w {
				t.Errorf("SHA-256 of the first %d lines = %s; want %s", n, got, w)
			}
		}
	}
	if checked == 0 {
		t.Error("no checksum compared")
	}
}

func TestAppendFloatSpecial(t *testing.T) {
	tests := []struct {
		v    float64
		want string
	}{
		{0, "0"},
		{math.Copysign(0, -1), "0"},
		{1e21, "1e+21"},
		{1e-7, "1e-7"},
		{1e-6, "0.000001"},
		{-1.5e-9, "-1.5e-9"},
		{1e100, "1e+100"},
		{123e-20, "1.23e-18"},
		{math.MaxFloat64, "1.7976931348623157e+308"},
		{math.SmallestNonzeroFloat64, "5e-324"},
	}
	for _, tt := range tests {
		got, err := AppendFloat([]byte("x"), tt.v)
		if err != nil || string(got) != "x"+tt.want {
			t.Errorf("AppendFloat(x, %v) = %q, %v; want %q", tt.v, got, err, "x"+tt.want)
		}
	}
	for _, v := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		got, err := AppendFloat([]byte("x"), v)
		if !errors.Is(err, ErrNumberRange) || string(got) != "x" {
			t.Errorf("AppendFloat(x, %v) = %q, %v; want %q, %v", v, got, err, "x", ErrNumberRange)
		}
	}
}

// TestShortDecimal checks the fast path for decimals against ParseFloat and
// AppendFloat.
func TestShortDecimal(t *testing.T) {
	var c Canonicalizer
	for _, in := range []string{
		"0.1", "0.5", "-0.05", "1.25", "3.141592653589", "0.000001", "0.0000012", "0.00000123456789012345",
		"0.0000001", "999999999999999.9", "99999999999999.99", "0.999999999999999", "0.9999999999999999",
		"123456789.123456", "1234567890123.45", "12345678901234.56", "0.30000000000000004", "2.5", "1.0", "10.50",
	} {
		f, err := strconv.ParseFloat(in, 64)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := AppendFloat(nil, f)
		got, err := c.Append(nil, []byte(in))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("Append(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}
