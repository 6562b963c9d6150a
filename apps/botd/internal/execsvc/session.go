package execsvc

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// sessionMembers lists the live (non-zombie) processes whose session id is
// sid, from /proc.
func sessionMembers(sid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if s, live := sessionOf(pid); live && s == sid {
			pids = append(pids, pid)
		}
	}
	return pids
}

// sessionOf reads a process's session id; live is false for zombies and
// vanished processes.
func sessionOf(pid int) (sid int, live bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// The command name may hold spaces and parentheses: fields start after
	// the last ')'. Then: state ppid pgrp session …
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 > len(b) {
		return 0, false
	}
	f := strings.Fields(string(b[i+2:]))
	if len(f) < 4 || f[0] == "Z" || f[0] == "X" {
		return 0, false
	}
	sid, err = strconv.Atoi(f[3])
	return sid, err == nil
}

// killSession SIGKILLs every process of session sid (a terminal's shell and
// everything it started, whatever process group job control put it in),
// repeating while new ones appear. Each process is pinned with a pidfd and
// its session re-checked before the signal, so a recycled pid is never hit.
func killSession(sid int) {
	for round := 0; round < 50; round++ {
		pids := sessionMembers(sid)
		if len(pids) == 0 {
			return
		}
		for _, pid := range pids {
			fd, err := unix.PidfdOpen(pid, 0)
			if err != nil {
				continue
			}
			if s, live := sessionOf(pid); live && s == sid {
				_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
			}
			unix.Close(fd)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
