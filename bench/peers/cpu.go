package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTicks is the unit of /proc/<pid>/stat's CPU times (USER_HZ, 100 on
// Linux).
const clockTicks = 100

// treeCPU returns the CPU time (user + system) used by the live processes
// of the tree rooted at pid (a server and the backends it forked), or 0
// where /proc cannot tell.
func treeCPU(pid int) time.Duration {
	if pid <= 0 {
		return 0
	}
	type stat struct {
		ppid  int
		ticks int64
	}
	procs := map[int]stat{}
	dirs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, d := range dirs {
		b, err := os.ReadFile(d)
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		// After the command: state ppid ... utime (14th field overall,
		// f[11]) stime (f[12]).
		if len(f) < 13 {
			continue
		}
		p, _ := strconv.Atoi(filepath.Base(filepath.Dir(d)))
		ppid, _ := strconv.Atoi(f[1])
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		procs[p] = stat{ppid, ut + st}
	}
	var total int64
	in := map[int]bool{pid: true}
	// Parents may have larger pids than children after pid wrap; iterate
	// until nothing new joins.
	for changed := true; changed; {
		changed = false
		for p, s := range procs {
			if !in[p] && in[s.ppid] {
				in[p], changed = true, true
			}
		}
	}
	for p := range in {
		total += procs[p].ticks
	}
	return time.Duration(total) * time.Second / clockTicks
}
