package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/internal/testdb"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/server"
	"github.com/toolgate/toolgate/tools"
	"github.com/toolgate/toolgate/txn"
)

// GET /v1/executions/{id} does not present a record that the audit log
// does not prove: a record edited in the database file (its output
// changed) is answered 409 with the fields that disagree.
func TestServer_ForgedRecordFlagged(t *testing.T) {
	testdb.BboltOnly(t, "it edits the record in the bbolt file, below the store's API")
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "toolgate.db")
	g := newGate()
	t.Cleanup(g.open)
	start := func() (*tgruntime.Runtime, *httptest.Server) {
		reg := tools.NewRegistry()
		for _, tl := range testTools(g) {
			if err := reg.Register(tl); err != nil {
				t.Fatal(err)
			}
		}
		policy, err := capability.NewPolicy(map[string][]capability.Capability{"agent": {capability.MustParse("state.write:test")}})
		if err != nil {
			t.Fatal(err)
		}
		rt, err := tgruntime.Open(path, &tgruntime.Options{Registry: reg, Policy: policy, NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		srv, err := server.New(rt, testConfig(), nil)
		if err != nil {
			t.Fatal(err)
		}
		return rt, httptest.NewServer(srv.Handler())
	}
	get := func(hs *httptest.Server, id string) (int, map[string]any) {
		req, _ := http.NewRequest(http.MethodGet, hs.URL+"/v1/executions/"+id, nil)
		req.Header.Set("Authorization", "Bearer "+agentToken)
		resp, err := hs.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		json.NewDecoder(resp.Body).Decode(&m)
		return resp.StatusCode, m
	}

	rt, hs := start()
	res, err := rt.Execute(ctx, tgruntime.Invocation{Tool: "test.echo", Principal: "agent", Input: json.RawMessage(`{"msg":"real"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if code, m := get(hs, res.ExecutionID); code != http.StatusOK || m["output"] == nil {
		t.Fatalf("an untouched record: %d %v", code, m)
	}
	rec, err := rt.Execution(ctx, res.ExecutionID)
	if err != nil {
		t.Fatal(err)
	}
	hs.Close()
	rt.Close(ctx)

	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	rec.Output = json.RawMessage(`{"msg":"forged"}`)
	data, err := txn.EncodeRecord(rec)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error { return tx.Bucket([]byte("executions")).Put([]byte(rec.ExecutionID), data) }); err != nil {
		t.Fatal(err)
	}
	db.Close()

	rt, hs = start()
	defer rt.Close(ctx)
	defer hs.Close()
	code, m := get(hs, res.ExecutionID)
	if code != http.StatusConflict || !strings.Contains(m["type"].(string), "record-not-proven") {
		t.Fatalf("a forged record: %d %v; want 409 record-not-proven", code, m)
	}
	ds, _ := json.Marshal(m["discrepancies"])
	if !strings.Contains(string(ds), `"field":"output"`) || strings.Contains(string(ds), "forged") && m["output"] != nil {
		t.Errorf("the answer does not name the field, or shows the forged output: %v", m)
	}
}
