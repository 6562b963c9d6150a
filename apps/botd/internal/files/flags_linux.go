package files

import "syscall"

const (
	nonblock  = syscall.O_NONBLOCK
	directory = syscall.O_DIRECTORY
)
