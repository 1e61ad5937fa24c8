package docscheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Every test the conformance matrix names must exist, so the matrix cannot
// point at a test that was renamed or deleted.
func TestConformanceMatrix_NamesExistingTests(t *testing.T) {
	doc, err := os.ReadFile("../../docs/conformance.md")
	if err != nil {
		t.Fatal(err)
	}
	refs := regexp.MustCompile("`([a-z/]+)\\.(Test[A-Za-z0-9_]+)").FindAllStringSubmatch(string(doc), -1)
	if len(refs) < 50 {
		t.Fatalf("only %d test references found; is the pattern broken?", len(refs))
	}
	sources := map[string]string{}
	for _, ref := range refs {
		pkg, name := ref[1], ref[2]
		if pkg == "package" {
			continue // the "package.TestName" legend
		}
		src, ok := sources[pkg]
		if !ok {
			files, _ := filepath.Glob(filepath.Join("../..", pkg, "*_test.go"))
			var b strings.Builder
			for _, f := range files {
				data, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				b.Write(data)
			}
			src = b.String()
			sources[pkg] = src
		}
		if !strings.Contains(src, "func "+name+"(") {
			t.Errorf("docs/conformance.md names %s.%s, which does not exist", pkg, name)
		}
	}
}

// Every row of the matrix has a status: yes (and names a test), or partial
// (and names the issue that delivers the rest). No row may be "not yet" or
// "untested": every rule of the five documents is enforced and tested, or a
// deliberate departure said as such.
func TestConformanceMatrix_Rows(t *testing.T) {
	doc, err := os.ReadFile("../../docs/conformance.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := 0
	for _, line := range strings.Split(string(doc), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) != 6 || strings.HasPrefix(strings.TrimSpace(cells[1]), "§") || strings.HasPrefix(strings.TrimSpace(cells[1]), "---") {
			continue
		}
		rows++
		status, proof := strings.TrimSpace(cells[3]), cells[4]
		switch status {
		case "yes":
			if !strings.Contains(proof, ".Test") && !strings.Contains(proof, "runtime/") {
				t.Errorf("row %q says yes but names no test", strings.TrimSpace(cells[2]))
			}
		case "partial":
			if !strings.Contains(proof, "issue ") && !strings.Contains(proof, "judgment") {
				t.Errorf("row %q is %s but names no issue", strings.TrimSpace(cells[2]), status)
			}
		default:
			t.Errorf("row %q has status %q", strings.TrimSpace(cells[2]), status)
		}
	}
	if rows < 50 {
		t.Fatalf("only %d rows parsed", rows)
	}
}
