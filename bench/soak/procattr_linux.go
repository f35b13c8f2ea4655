package main

import "syscall"

// sysProcAttr puts a child in a process group of its own, so that a Ctrl-C
// at the terminal reaches the harness alone (which then kills the
// children), and has the kernel kill it if the harness dies first.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
