//go:build !linux

package main

import "syscall"

// sysProcAttr puts a child in a process group of its own, so that a Ctrl-C
// at the terminal reaches the harness alone, which then kills the children.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
