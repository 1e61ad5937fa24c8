package wal

import (
	"os"

	"golang.org/x/sys/unix"
)

// fdatasync makes f's data durable, and of its metadata what reading the
// data back needs (its size): not its times, which a full fsync would
// also write.
func fdatasync(f *os.File) error {
	for {
		err := unix.Fdatasync(int(f.Fd()))
		if err != unix.EINTR {
			return err
		}
	}
}
