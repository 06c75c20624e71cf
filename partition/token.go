package partition

import (
	"encoding/binary"

	"github.com/quorumbus/quorumbus/fsm"
)

// GroupOfToken returns the group id encoded in a lock token (bytes 0..3, big-endian;
// see fsm.LockToken), so any node can route a settlement or renewal that arrives with
// only the token (S-LOCK-10).
func GroupOfToken(tok fsm.LockToken) uint32 {
	return binary.BigEndian.Uint32(tok[:4])
}
