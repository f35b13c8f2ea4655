//go:build !linux

package dedupe

// allocTable returns a zeroed table of nb buckets on the Go heap.
func allocTable(nb uint64) (table []bucket, release func()) {
	return make([]bucket, nb), nil
}
