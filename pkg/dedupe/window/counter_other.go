//go:build !amd64 || !linux || purego

package window

const hasCounter = false

func readCounter() uint64 { return 0 }

func kernelKeepsTimeWithCounter() bool { return false }
