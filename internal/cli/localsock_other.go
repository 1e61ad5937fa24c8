//go:build !linux

package cli

import (
	"errors"
	"net"
)

// peerCred is not implemented here: without the peer's credentials the
// local socket is not served, nor used.
func peerCred(net.Conn) (uid, pid int, err error) {
	return 0, 0, errors.New("the peer's credentials cannot be read on this system")
}

// localSocketSupported: the peer's credentials cannot be read here.
const localSocketSupported = false
