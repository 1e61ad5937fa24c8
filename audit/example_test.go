package audit_test

import (
	"fmt"

	"github.com/toolgate/toolgate/audit"
)

func ExampleHash() {
	a := []byte(`{"tool":"fs.read","args":{"path":"/srv/data/x","limit":10}}`)
	b := []byte(`{
	  "args": { "limit": 1e1, "path": "\/srv\/data\/x" },
	  "tool": "fs.read"
	}`)
	ha, _ := audit.Hash(a)
	hb, _ := audit.Hash(b)
	c, _ := audit.Canonicalize(b)
	fmt.Println(string(c))
	fmt.Println(ha == hb)
	fmt.Println(ha)
	// Output:
	// {"args":{"limit":10,"path":"/srv/data/x"},"tool":"fs.read"}
	// true
	// 38904774cc6440a06e6cb3f738da0c269b99b33f3b2aaa2b6d697a1d06ce8ee9
}
