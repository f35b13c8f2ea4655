//go:build !linux

package window

// allocTable returns a zeroed table of nb buckets on the Go heap.
func allocTable(nb uint64) (table []bucket, release func()) {
	return make([]bucket, nb), nil
}
