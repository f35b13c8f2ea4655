//go:build amd64 && !purego

package window

import "golang.org/x/sys/cpu"

// useAVX2 selects scanAVX2 over scanGeneric.
var useAVX2 = cpu.X86.HasAVX2

// scanAVX2 is scanGeneric in AVX2: four words per instruction.
//
//go:noescape
func scanAVX2(xs *[2 * slotsPerBucket]uint64, p *scanParams) (match, free uint32)
