package cli

import (
	"errors"
	"net"
	"syscall"
)

// peerCred returns the credentials of the process at the other end of a
// Unix socket connection (SO_PEERCRED): for a server, its client; for a
// client, the server that listens (as it was when it called listen).
func peerCred(c net.Conn) (uid, pid int, err error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return 0, 0, errors.New("not a Unix socket connection")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0, 0, err
	}
	var cred *syscall.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return 0, 0, err
	}
	if cerr != nil {
		return 0, 0, cerr
	}
	return int(cred.Uid), int(cred.Pid), nil
}

// localSocketSupported: the peer's credentials can be read here.
const localSocketSupported = true
