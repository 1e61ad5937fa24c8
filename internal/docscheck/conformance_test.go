package docscheck

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
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
			if !strings.Contains(proof, "issue ") && !strings.Contains(proof, "judgment") && !strings.Contains(proof, "Out of scope:") {
				t.Errorf("row %q is %s but names no issue, judgment or what is out of scope", strings.TrimSpace(cells[2]), status)
			}
		default:
			t.Errorf("row %q has status %q", strings.TrimSpace(cells[2]), status)
		}
	}
	if rows < 50 {
		t.Fatalf("only %d rows parsed", rows)
	}
}

// rfc0001Threats are the threats of RFC-0001 section 2.1, each with its
// mitigation, as the RFC words them.
var rfc0001Threats = map[string]string{
	"T-001": "Input validation MUST occur before execution",
	"T-002": "Resource limits MUST be enforced",
	"T-003": "Transactional execution MUST be used",
	"T-004": "Capability checks MUST precede execution",
	"T-005": "Execution MUST be deterministic",
	"T-006": "Audit events MUST be immutable",
}

// rfc0001Checklist is RFC-0001 section 9, the compliance checklist, line
// by line, as the RFC words it.
var rfc0001Checklist = map[string][]string{
	"9.1": {
		"Tool declares all required metadata",
		"Tool provides valid input schema",
		"Tool provides valid output schema",
		"Tool declares required capabilities",
		"Tool declares resource limits",
		"Tool specifies determinism property",
		"Tool specifies idempotency property",
		"Tool uses StateTransaction for all mutations",
		"Tool reports all errors via ErrorHandler",
		"Tool never throws unhandled exceptions",
	},
	"9.2": {
		"Runtime validates inputs before execution",
		"Runtime authorizes capabilities before execution",
		"Runtime enforces resource limits during execution",
		"Runtime validates outputs after execution",
		"Runtime emits all required audit events",
		"Runtime emits all required telemetry",
		"Runtime performs rollback on failure",
		"Runtime never allows state corruption",
	},
	"9.3": {
		"StateTransaction integration is active",
		"ErrorHandler integration is active",
		"Telemetry integration is active",
		"Capability system integration is active",
		"Sandbox integration is active (see RFC-0002)",
	},
}

// Every threat of RFC-0001 section 2 has its row, "2 (T-00N)", whose
// requirement states the RFC's mitigation (in any case); every line of the section 9
// checklist has its row, "9.N", whose requirement is the line. Each row is
// then held to the rules of TestConformanceMatrix_Rows (a test named, or
// what is partial and why).
func TestConformanceMatrix_RFC0001ThreatsAndChecklist(t *testing.T) {
	doc, err := os.ReadFile("../../docs/conformance.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string][]string{} // § -> requirements
	for _, line := range strings.Split(string(doc), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) != 6 {
			continue
		}
		sec := strings.TrimSpace(cells[1])
		rows[sec] = append(rows[sec], strings.TrimSpace(cells[2]))
	}
	for id, mitigation := range rfc0001Threats {
		reqs := rows["2 ("+id+")"]
		if len(reqs) == 0 {
			t.Errorf("RFC-0001 threat %s (%s) has no row \"2 (%s)\"", id, mitigation, id)
			continue
		}
		if !slices.ContainsFunc(reqs, func(r string) bool { return strings.Contains(strings.ToLower(r), strings.ToLower(mitigation)) }) {
			t.Errorf("the row of RFC-0001 threat %s does not state its mitigation %q: %q", id, mitigation, reqs)
		}
	}
	for sec, lines := range rfc0001Checklist {
		for _, l := range lines {
			if !slices.Contains(rows[sec], l) {
				t.Errorf("RFC-0001 checklist line %s %q has no row (§ %q, the line as its requirement)", sec, l, sec)
			}
		}
	}
}
