//go:build linux

package window

import (
	"syscall"
	"unsafe"
)

// hugePage is the size of a transparent huge page on the platforms Oncegate
// runs on (x86-64 and arm64 with 4 KiB base pages).
const hugePage = 2 << 20

// allocTable returns a zeroed table of nb buckets. On Linux a table of at
// least one huge page is mapped outside the Go heap, aligned to huge pages
// and advised to use them: a window's lookups land on random buckets, and
// with 4 KiB pages nearly every one also misses the TLB (a page walk that
// costs as much as the lookup, more under virtualization). release unmaps
// it; it is nil for a table on the Go heap.
func allocTable(nb uint64) (table []bucket, release func()) {
	size := nb * uint64(unsafe.Sizeof(bucket{}))
	if size < hugePage || size > 1<<46 {
		return make([]bucket, nb), nil
	}
	mem, err := syscall.Mmap(-1, 0, int(size+hugePage), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		return make([]bucket, nb), nil
	}
	off := (hugePage - uintptr(unsafe.Pointer(&mem[0]))%hugePage) % hugePage
	// Advice only: where transparent huge pages are off, the table works
	// on base pages.
	_ = syscall.Madvise(mem[off:off+uintptr(size)], syscall.MADV_HUGEPAGE)
	table = unsafe.Slice((*bucket)(unsafe.Pointer(&mem[off])), nb)
	return table, func() { _ = syscall.Munmap(mem) }
}
