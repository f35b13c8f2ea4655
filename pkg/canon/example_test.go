package canon_test

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"math"

	"github.com/oncegate/oncegate/pkg/canon"
)

func ExampleAppend() {
	a, _ := canon.Append(nil, []byte(`{"b": [1.0, 2e0], "a": "\u00e9"}`))
	b, _ := canon.Append(nil, []byte(`{"a":"é","b":[1,2]}`))
	fmt.Printf("%s\n%s\n", a, b)
	fmt.Println(sha256.Sum256(a) == sha256.Sum256(b))
	// Output:
	// {"a":"é","b":[1,2]}
	// {"a":"é","b":[1,2]}
	// true
}

func ExampleAppend_errors() {
	for _, in := range []string{
		`{"id": 1, "id": 2}`,
		`{"order_id": 9007199254740993}`,
		"\xef\xbb\xbf{}",
		`[1, 2,]`,
	} {
		_, err := canon.Append(nil, []byte(in))
		var e *canon.Error
		if errors.As(err, &e) {
			fmt.Println(e.Offset, errors.Is(err, canon.ErrDuplicateName), err)
		}
	}
	// Output:
	// 10 true canon: duplicate object member name "id" at byte 10
	// 13 false canon: integer cannot be represented exactly: 9007199254740993 exceeds 2^53 and would become 9007199254740992 (send IDs as strings) at byte 13
	// 0 false canon: byte order mark not allowed at byte 0
	// 6 false canon: invalid JSON: unexpected character ']' instead of a value at byte 6
}

func ExampleNew() {
	c, err := canon.New(canon.Options{MaxDepth: 2})
	if err != nil {
		panic(err)
	}
	var buf []byte
	for _, in := range []string{`[[1]]`, `[[[1]]]`} {
		out, err := c.Append(buf[:0], []byte(in)) // reuses buf
		fmt.Printf("%q %v\n", out, err)
		buf = out
	}
	// Output:
	// "[[1]]" <nil>
	// "" canon: nesting too deep: limit is 2 at byte 2
}

func ExampleAppendFloat() {
	for _, f := range []float64{1e21, 1e20, 1e-7, 0.000001, 333333333.33333329, math.Copysign(0, -1)} {
		b, _ := canon.AppendFloat(nil, f)
		fmt.Println(string(b))
	}
	// Output:
	// 1e+21
	// 100000000000000000000
	// 1e-7
	// 0.000001
	// 333333333.3333333
	// 0
}

func ExampleSelect() {
	doc, err := canon.Append(nil, []byte(`{
		"labels": {"alertname": "HighLatency", "service": "checkout", "pod": "checkout-7f9c"},
		"startsAt": "2025-11-28T09:14:07Z"
	}`))
	if err != nil {
		panic(err)
	}
	var ptrs []canon.Pointer
	for _, s := range []string{"/labels/alertname", "/labels/service"} {
		p, err := canon.ParsePointer(s)
		if err != nil {
			panic(err)
		}
		ptrs = append(ptrs, p)
	}
	key, err := canon.Select(nil, doc, ptrs)
	fmt.Printf("%s %v\n", key, err)

	missing, _ := canon.ParsePointer("/labels/severity")
	_, err = canon.Select(nil, doc, []canon.Pointer{missing})
	fmt.Println(errors.Is(err, canon.ErrNotFound), err)
	// Output:
	// ["HighLatency","checkout"] <nil>
	// true canon: pointer "/labels/severity": no value at pointer
}

func ExampleLookup() {
	doc, _ := canon.Append(nil, []byte(`{"commits": [{"id": "9b1c", "author": {"name": "Zoë"}}], "a/b": true}`))
	for _, s := range []string{"/commits/0/author", "/a~1b", "/commits/1", "/commits/-"} {
		p, _ := canon.ParsePointer(s)
		v, ok, err := canon.Lookup(doc, p)
		fmt.Printf("%s %s %v %v\n", s, v, ok, err)
	}
	// Output:
	// /commits/0/author {"name":"Zoë"} true <nil>
	// /a~1b true true <nil>
	// /commits/1  false <nil>
	// /commits/-  false <nil>
}

func ExampleOmit() {
	doc, _ := canon.Append(nil, []byte(`{"event_id": "fc6d", "timestamp": 1764321247.5, "tags": ["a", "b", "c"], "msg": "boom"}`))
	var drop []canon.Pointer
	for _, s := range []string{"/event_id", "/timestamp", "/tags/0", "/tags/2", "/not/there"} {
		p, _ := canon.ParsePointer(s)
		drop = append(drop, p)
	}
	out, err := canon.Omit(nil, doc, drop)
	fmt.Printf("%s %v\n", out, err)
	// Output:
	// {"msg":"boom","tags":["b"]} <nil>
}
