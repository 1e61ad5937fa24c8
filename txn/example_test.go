package txn_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/toolgate/toolgate/txn"
)

// A tool's state writes are buffered by its Tx and applied, together with
// the execution's terminal record, by one Commit.
func ExampleStore_Begin() {
	dir, err := os.MkdirTemp("", "txn-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	s, err := txn.Open(filepath.Join(dir, "toolgate.db"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	ctx := context.Background()
	rec := &txn.Record{
		ExecutionID: "exec-1",
		CallID:      "call-1",
		Attempt:     1,
		ToolID:      "counter",
		ToolVersion: "1.0.0",
		State:       "EXECUTING",
		StartedAt:   time.Now(),
	}
	tx, err := s.Begin(ctx, rec)
	if err != nil {
		log.Fatal(err)
	}

	// The tool runs, writing through the Tx.
	if err := tx.Put("counter", "hits", []byte("1")); err != nil {
		log.Fatal(err)
	}
	_, visible, _ := s.StateValue(ctx, "counter", "hits")
	fmt.Println("visible before commit:", visible)

	rec.State = "COMPLETED"
	rec.EndedAt = time.Now()
	if err := tx.Commit(ctx, rec); err != nil {
		log.Fatal(err)
	}

	v, _, err := s.StateValue(ctx, "counter", "hits")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("hits:", string(v))

	stored, err := s.Get(ctx, "exec-1")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s: puts=%d committed=%t\n", stored.State, stored.WriteSet.Puts, stored.WriteSet.Committed)

	err = tx.Put("counter", "hits", []byte("2"))
	fmt.Println(err)
	// Output:
	// visible before commit: false
	// hits: 1
	// COMPLETED: puts=1 committed=true
	// txn: transaction already committed or rolled back
}
