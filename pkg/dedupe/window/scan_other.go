//go:build !amd64 || purego

package window

// useAVX2 is false: scan runs scanGeneric.
var useAVX2 = false

func scanAVX2(xs *[2 * slotsPerBucket]uint64, p *scanParams) (match, free uint32) {
	return scanGeneric(xs, p)
}
