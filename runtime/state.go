package runtime

import (
	"sync"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/tools"
	"github.com/toolgate/toolgate/txn"
)

// stateHandle is the tool's view of its transaction: reads need
// state.read or state.write on the namespace, writes need state.write.
// Anything else is a *tools.AccessError. It hides the *txn.Tx, so a tool
// cannot commit or roll back its own transaction.
type stateHandle struct {
	tx     *txn.Tx
	grants []capability.Capability

	// maxBytes bounds what the attempt buffers in its write-set (the
	// declared maxMemory; 0: unbounded): memory the runtime holds on the
	// tool's behalf, so it is the part of an in-process tool's memory the
	// runtime can bound. buffered is the size of the write-set now: each
	// key and value put, an overwrite replacing what it overwrote.
	maxBytes int64
	mu       sync.Mutex
	buffered int64
	sizes    map[string]int64 // namespace + "\x00" + key -> bytes buffered for it
}

// account changes the write-set's size for one key to n bytes, refusing a
// growth past maxBytes.
func (s *stateHandle) account(namespace, key string, n int64) error {
	if s.maxBytes <= 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := namespace + "\x00" + key
	got := s.buffered - s.sizes[k] + n
	if got > s.maxBytes && n > s.sizes[k] {
		return &tools.LimitError{Limit: "memory_limit", Max: s.maxBytes, Got: got}
	}
	if s.sizes == nil {
		s.sizes = make(map[string]int64)
	}
	s.buffered, s.sizes[k] = got, n
	return nil
}

var _ tools.State = (*stateHandle)(nil)

func (s *stateHandle) allow(namespace string, names ...string) error {
	if reserved(namespace) {
		return &tools.AccessError{Capability: names[0] + ":" + namespace, Reason: "namespaces under " + reservedPrefix + " belong to the runtime"}
	}
	for _, name := range names {
		for _, g := range s.grants {
			if g.Covers(capability.Capability{Name: name, Scope: namespace}) {
				return nil
			}
		}
	}
	return &tools.AccessError{Capability: names[0] + ":" + namespace, Reason: "namespace not granted"}
}

func (s *stateHandle) Get(namespace, key string) ([]byte, bool, error) {
	if err := s.allow(namespace, "state.read", "state.write"); err != nil {
		return nil, false, err
	}
	return s.tx.Get(namespace, key)
}

func (s *stateHandle) Put(namespace, key string, value []byte) error {
	if err := s.allow(namespace, "state.write"); err != nil {
		return err
	}
	if err := s.account(namespace, key, int64(len(namespace)+len(key)+len(value))); err != nil {
		return err
	}
	return s.tx.Put(namespace, key, value)
}

func (s *stateHandle) Delete(namespace, key string) error {
	if err := s.allow(namespace, "state.write"); err != nil {
		return err
	}
	if err := s.account(namespace, key, int64(len(namespace)+len(key))); err != nil {
		return err
	}
	return s.tx.Delete(namespace, key)
}

func (s *stateHandle) Scan(namespace, prefix string, limit int) ([]tools.KV, error) {
	if err := s.allow(namespace, "state.read", "state.write"); err != nil {
		return nil, err
	}
	es, err := s.tx.Scan(namespace, prefix, limit)
	if err != nil {
		return nil, err
	}
	out := make([]tools.KV, len(es))
	for i, e := range es {
		out[i] = tools.KV{Key: e.Key, Value: e.Value}
	}
	return out, nil
}
