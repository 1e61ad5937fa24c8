package txn

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Records are stored in a compact binary form (format 3): about half the
// size of their JSON, which matters because every invocation writes two of
// them inside the serialized bbolt update, and fewer bytes fill fewer pages.
//
//	record   = tag(0x01) str(ExecutionID) str(CallID) str(TraceID) varint(Attempt)
//	           str(ToolID) str(ToolVersion) str(Principal) str(State)
//	           uvarint(len(Transitions)+1, or 0 for nil) transition*
//	           strs(Capabilities) str(InputHash) bytes(Output) str(OutputHash)
//	           opt(ErrorInfo) opt(WriteSetSummary) strs(AuditEvents)
//	           time(StartedAt) time(EndedAt) [more]
//	more     = opt(token) opt(procs): present exactly when the tag is 0x02,
//	           a record with a Token or Processes; records without either
//	           have the tag 0x01 and end at EndedAt, as every record written
//	           before them did, and still decode. A record of either tag cut
//	           short or running on is refused.
//	token    = str(Issuer) str(Subject) str(SHA256)
//	procs    = uvarint(n) process*
//	process  = varint(Pid) uvarint(StartTime) varint(Session) str(BootID)
//	           str(Host) str(Cgroup) str(Command)
//	transition = str(From) str(To) str(Event) time(At) str(Reason)
//	str      = uvarint(n<<2 | kind) ...: kind 0: n bytes, the string as is;
//	           kind 1 (n = 0): the 16 bytes of a UUID in its canonical
//	           lowercase form (36 characters); kind 2: n bytes whose
//	           lowercase hex is the string (ids and SHA-256 hashes)
//	strs     = uvarint(n) str*
//	bytes    = uvarint(len) bytes
//	time     = bytes(time.Time.AppendBinary) (location offset included)
//	opt(x)   = 0x00 | 0x01 x
//	error    = str(Type) str(Code) str(Message) str(Stack)
//	writeSet = varint(Puts) varint(Deletes) strs(Namespaces) byte(Committed)
//
// A record decodes to the value its JSON form (the Record's json tags)
// decodes to: empty slices and strings marked omitempty come back nil and
// empty, times keep their zone offset, and Output is stored compacted, as
// json.Marshal writes a RawMessage. Unlike JSON, strings are kept byte for
// byte, even when they are not valid UTF-8.
const (
	recordTag     = 0x01
	recordTagMore = 0x02 // a record with a Token or Processes, stored after EndedAt
)

// EncodeRecord returns the stored form of r, exactly as Begin, Put, Commit
// and Rollback write it, for a tool that must reproduce the store's writes
// (the floor of toolgate bench). It fails like those methods on an invalid
// record (ErrInvalidRecord).
func EncodeRecord(r *Record) ([]byte, error) { return encodeRecord(r) }

// appendRecord appends the stored form of r. It refuses what JSON could not
// hold: an Output that is not valid JSON, a time outside years 0 to 9999 or
// with a zone offset of a day or more (json.Marshal refuses them, so such a
// record could not be shown).
func appendRecord(b []byte, r *Record) ([]byte, error) {
	if hasMore(r) {
		b = append(b, recordTagMore)
	} else {
		b = append(b, recordTag)
	}
	b = appendStr(b, r.ExecutionID)
	b = appendStr(b, r.CallID)
	b = appendStr(b, r.TraceID)
	b = binary.AppendVarint(b, int64(r.Attempt))
	b = appendStr(b, r.ToolID)
	b = appendStr(b, r.ToolVersion)
	b = appendStr(b, r.Principal)
	b = appendStr(b, r.State)
	var err error
	if r.Transitions == nil {
		b = append(b, 0)
	} else {
		b = binary.AppendUvarint(b, uint64(len(r.Transitions))+1)
		for _, t := range r.Transitions {
			b = appendStr(b, t.From)
			b = appendStr(b, t.To)
			b = appendStr(b, t.Event)
			if b, err = appendTime(b, t.At); err != nil {
				return nil, err
			}
			b = appendStr(b, t.Reason)
		}
	}
	b = appendStrs(b, r.Capabilities)
	b = appendStr(b, r.InputHash)
	if len(r.Output) > 0 {
		if !json.Valid(r.Output) {
			return nil, errors.New("output is not valid JSON")
		}
		b = binary.AppendUvarint(b, uint64(compactLen(r.Output)))
		b = appendCompact(b, r.Output)
	} else {
		b = append(b, 0)
	}
	b = appendStr(b, r.OutputHash)
	if e := r.Error; e != nil {
		b = append(b, 1)
		b = appendStr(b, e.Type)
		b = appendStr(b, e.Code)
		b = appendStr(b, e.Message)
		b = appendStr(b, e.Stack)
	} else {
		b = append(b, 0)
	}
	if w := r.WriteSet; w != nil {
		b = append(b, 1)
		b = binary.AppendVarint(b, int64(w.Puts))
		b = binary.AppendVarint(b, int64(w.Deletes))
		b = appendStrs(b, w.Namespaces)
		if w.Committed {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
	} else {
		b = append(b, 0)
	}
	b = appendStrs(b, r.AuditEvents)
	if b, err = appendTime(b, r.StartedAt); err != nil {
		return nil, err
	}
	if b, err = appendTime(b, r.EndedAt); err != nil {
		return nil, err
	}
	if hasMore(r) {
		if tk := r.Token; tk != nil {
			b = append(b, 1)
			b = appendStr(b, tk.Issuer)
			b = appendStr(b, tk.Subject)
			b = appendStr(b, tk.SHA256)
		} else {
			b = append(b, 0)
		}
		if len(r.Processes) > 0 {
			b = append(b, 1)
			b = binary.AppendUvarint(b, uint64(len(r.Processes)))
			for _, p := range r.Processes {
				b = binary.AppendVarint(b, int64(p.Pid))
				b = binary.AppendUvarint(b, p.StartTime)
				b = binary.AppendVarint(b, int64(p.Session))
				b = appendStr(b, p.BootID)
				b = appendStr(b, p.Host)
				b = appendStr(b, p.Cgroup)
				b = appendStr(b, p.Command)
			}
		} else {
			b = append(b, 0)
		}
	}
	return b, nil
}

// hasMore reports whether r is stored with the tag 0x02: it has a Token or
// Processes.
func hasMore(r *Record) bool { return r.Token != nil || len(r.Processes) > 0 }

// String kinds (see the format above).
const (
	strRaw  = 0
	strUUID = 1
	strHex  = 2
)

func appendStr(b []byte, s string) []byte {
	if u, ok := uuidBytes(s); ok {
		b = append(b, strUUID)
		return append(b, u[:]...)
	}
	if len(s) >= 4 && len(s)%2 == 0 {
		n := len(b)
		b = binary.AppendUvarint(b, uint64(len(s)/2)<<2|strHex)
		var digits byte // the OR of the digits' values: notHex if one is not a digit
		for i := 0; i < len(s); i += 2 {
			hi, lo := unhexTab[s[i]], unhexTab[s[i+1]]
			digits |= hi | lo
			b = append(b, hi<<4|lo)
		}
		if digits != notHex {
			return b
		}
		b = b[:n] // not lowercase hex: stored raw
	}
	b = binary.AppendUvarint(b, uint64(len(s))<<2|strRaw)
	return append(b, s...)
}

// notHex is what unhexTab maps a byte that is not a lowercase hex digit
// to: all bits set, so that the OR of the values of a string's bytes is
// notHex exactly when one of them is not a digit.
const notHex = 0xff

// unhexTab maps a lowercase hex digit to its value and anything else to
// notHex.
var unhexTab = func() (t [256]byte) {
	for i := range t {
		t[i] = notHex
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = byte(c - '0')
	}
	for c := 'a'; c <= 'f'; c++ {
		t[c] = byte(c-'a') + 10
	}
	return t
}()

// uuidHex are the offsets of the hex digit pairs of a canonical UUID.
var uuidHex = [16]int{0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34}

// uuidBytes returns the bytes of s if it is a UUID in canonical form: 36
// characters, lowercase hex digits with hyphens at 8, 13, 18 and 23.
func uuidBytes(s string) (u [16]byte, ok bool) {
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return u, false
	}
	var digits byte
	for j, i := range uuidHex {
		hi, lo := unhexTab[s[i]], unhexTab[s[i+1]]
		digits |= hi | lo
		u[j] = hi<<4 | lo
	}
	return u, digits != notHex
}

func appendStrs(b []byte, ss []string) []byte {
	b = binary.AppendUvarint(b, uint64(len(ss)))
	for _, s := range ss {
		b = appendStr(b, s)
	}
	return b
}

// appendTime appends t (its instant and zone offset), refusing the years
// and offsets time.Time.MarshalJSON refuses.
func appendTime(b []byte, t time.Time) ([]byte, error) {
	if y := t.Year(); y < 0 || y > 9999 {
		return nil, errors.New("time year outside of range [0,9999]")
	}
	if _, off := t.Zone(); off <= -24*3600 || off >= 24*3600 {
		return nil, errors.New("time zone offset outside of range (-24h, 24h)")
	}
	n := len(b)
	b, err := t.AppendBinary(append(b, 0))
	if err != nil {
		return nil, err
	}
	b[n] = byte(len(b) - n - 1)
	return b, nil
}

// compactLen is the length of appendCompact's output for raw.
func compactLen(raw []byte) int {
	n := 0
	var j jsonCompactor
	for _, c := range raw {
		if j.keep(c) {
			n++
		}
	}
	return n
}

// appendCompact appends valid JSON without insignificant whitespace, as
// json.Marshal does for a RawMessage.
func appendCompact(b, raw []byte) []byte {
	var j jsonCompactor
	for _, c := range raw {
		if j.keep(c) {
			b = append(b, c)
		}
	}
	return b
}

// jsonCompactor decides, byte by byte through valid JSON, which bytes a
// compact encoding keeps: all but whitespace outside strings.
type jsonCompactor struct {
	inString, escaped bool
}

func (j *jsonCompactor) keep(c byte) bool {
	switch {
	case j.inString:
		switch {
		case j.escaped:
			j.escaped = false
		case c == '\\':
			j.escaped = true
		case c == '"':
			j.inString = false
		}
	case c == '"':
		j.inString = true
	case c == ' ' || c == '\t' || c == '\n' || c == '\r':
		return false
	}
	return true
}

// recordDecoder reads the stored form of a record. Any malformation sets
// err; later reads then return zero values.
type recordDecoder struct {
	b   []byte
	err error
}

func (d *recordDecoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("malformed %s", what)
	}
	d.b = nil
}

func (d *recordDecoder) uvarint(what string) uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail(what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *recordDecoder) varint(what string) int {
	v, n := binary.Varint(d.b)
	if n <= 0 || int64(int(v)) != v {
		d.fail(what)
		return 0
	}
	d.b = d.b[n:]
	return int(v)
}

func (d *recordDecoder) byte(what string) byte {
	if len(d.b) == 0 {
		d.fail(what)
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *recordDecoder) flag(what string) bool {
	switch d.byte(what) {
	case 0:
		return false
	case 1:
		return true
	}
	d.fail(what)
	return false
}

func (d *recordDecoder) bytes(what string) []byte {
	n := d.uvarint(what)
	if n > uint64(len(d.b)) {
		d.fail(what)
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *recordDecoder) str(what string) string {
	h := d.uvarint(what)
	n := h >> 2
	switch h & 3 {
	case strRaw:
		if n > uint64(len(d.b)) {
			d.fail(what)
			return ""
		}
		v := string(d.b[:n])
		d.b = d.b[n:]
		return v
	case strUUID:
		if n != 0 || len(d.b) < 16 {
			d.fail(what)
			return ""
		}
		var u [36]byte
		hex.Encode(u[0:8], d.b[0:4])
		hex.Encode(u[9:13], d.b[4:6])
		hex.Encode(u[14:18], d.b[6:8])
		hex.Encode(u[19:23], d.b[8:10])
		hex.Encode(u[24:], d.b[10:16])
		u[8], u[13], u[18], u[23] = '-', '-', '-', '-'
		d.b = d.b[16:]
		return string(u[:])
	case strHex:
		if n < 2 || n > uint64(len(d.b)) { // the encoder writes hex of 4 characters or more
			d.fail(what)
			return ""
		}
		v := hex.EncodeToString(d.b[:n])
		d.b = d.b[n:]
		return v
	}
	d.fail(what)
	return ""
}

func (d *recordDecoder) strs(what string) []string {
	n := d.uvarint(what)
	if n == 0 || n > uint64(len(d.b)) { // each string takes at least a byte
		if n != 0 {
			d.fail(what)
		}
		return nil
	}
	out := make([]string, n)
	for i := range out {
		out[i] = d.str(what)
	}
	return out
}

func (d *recordDecoder) time(what string) time.Time {
	raw := d.bytes(what)
	if d.err != nil {
		return time.Time{}
	}
	var t time.Time
	if err := t.UnmarshalBinary(raw); err != nil {
		d.fail(what)
		return time.Time{}
	}
	if _, off := t.Zone(); off == 0 {
		// JSON writes a zero offset as "Z", read back as UTC (also the zero
		// time's "0001-01-01T00:00:00Z").
		return t.UTC()
	}
	return t
}

// parseRecord decodes the stored form of a record. The result does not
// alias data.
func parseRecord(data []byte) (*Record, error) {
	d := &recordDecoder{b: data}
	tag := d.byte("tag")
	if tag != recordTag && tag != recordTagMore {
		return nil, errors.New("not a record of this format")
	}
	r := &Record{
		ExecutionID: d.str("executionId"),
		CallID:      d.str("callId"),
		TraceID:     d.str("traceId"),
		Attempt:     d.varint("attempt"),
		ToolID:      d.str("toolId"),
		ToolVersion: d.str("toolVersion"),
		Principal:   d.str("principal"),
		State:       d.str("state"),
	}
	if n := d.uvarint("transitions"); n > 0 {
		if n-1 > uint64(len(d.b)) {
			d.fail("transitions")
		} else {
			r.Transitions = make([]Transition, n-1)
			for i := range r.Transitions {
				t := &r.Transitions[i]
				t.From, t.To, t.Event = d.str("transition"), d.str("transition"), d.str("transition")
				t.At, t.Reason = d.time("transition time"), d.str("transition")
			}
		}
	}
	r.Capabilities = d.strs("capabilities")
	r.InputHash = d.str("inputHash")
	if out := d.bytes("output"); len(out) > 0 {
		r.Output = json.RawMessage(string(out))
	}
	r.OutputHash = d.str("outputHash")
	if d.flag("error") {
		r.Error = &ErrorInfo{Type: d.str("error"), Code: d.str("error"), Message: d.str("error"), Stack: d.str("error")}
	}
	if d.flag("writeSet") {
		w := &WriteSetSummary{Puts: d.varint("writeSet"), Deletes: d.varint("writeSet"), Namespaces: d.strs("writeSet")}
		w.Committed = d.flag("writeSet")
		r.WriteSet = w
	}
	r.AuditEvents = d.strs("auditEvents")
	r.StartedAt = d.time("startedAt")
	r.EndedAt = d.time("endedAt")
	if tag == recordTagMore {
		if d.flag("token") {
			r.Token = &TokenRef{Issuer: d.str("token"), Subject: d.str("token"), SHA256: d.str("token")}
		}
		if d.flag("processes") {
			if n := d.uvarint("processes"); n == 0 || n > uint64(len(d.b)) {
				d.fail("processes")
			} else {
				r.Processes = make([]Process, n)
				for i := range r.Processes {
					p := &r.Processes[i]
					p.Pid = d.varint("process")
					p.StartTime = d.uvarint("process")
					p.Session = d.varint("process")
					p.BootID, p.Host, p.Cgroup, p.Command = d.str("process"), d.str("process"), d.str("process"), d.str("process")
				}
			}
		}
	}
	if d.err == nil && len(d.b) > 0 {
		d.err = fmt.Errorf("%d bytes after the record", len(d.b))
	}
	if d.err != nil {
		return nil, d.err
	}
	return r, nil
}
