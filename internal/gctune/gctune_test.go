package gctune

import (
	"os"
	"runtime/debug"
	"testing"
)

func TestForServer(t *testing.T) {
	old := debug.SetGCPercent(100)
	defer debug.SetGCPercent(old)

	t.Setenv("GOGC", "150") // the operator's: kept
	debug.SetGCPercent(150)
	if got := ForServer(); got != 150 {
		t.Errorf("with GOGC=150: ForServer() = %d", got)
	}
	if got := debug.SetGCPercent(150); got != 150 {
		t.Errorf("with GOGC=150 the target became %d", got)
	}
}

func TestForServer_Unset(t *testing.T) {
	old := debug.SetGCPercent(100)
	defer debug.SetGCPercent(old)
	t.Setenv("GOGC", "") // restored after the test
	if err := os.Unsetenv("GOGC"); err != nil {
		t.Fatal(err)
	}
	if got := ForServer(); got != ServerPercent {
		t.Errorf("ForServer() = %d, want %d", got, ServerPercent)
	}
	if got := debug.SetGCPercent(100); got != ServerPercent {
		t.Errorf("the target is %d, want %d", got, ServerPercent)
	}
}
