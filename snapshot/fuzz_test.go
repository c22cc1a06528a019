package snapshot

import (
	"crypto/sha256"
	"testing"
)

// FuzzDecode: no meta file makes decode panic, and what it accepts
// encodes back to the same bytes, in whichever version it was written.
// The fuzzer varies the body; the trailer is computed, so inputs get
// past the checksum.
func FuzzDecode(f *testing.F) {
	full := &Meta{Version: Version, ID: "a", MemBytes: 64 * PageSize, DataBytes: 64 * PageSize,
		Runs: []Run{{Page: 1, Count: 2, Offset: PageSize}}, State: []byte(`{"x":1}`)}
	delta := &Meta{Version: 1, ID: "b", Parent: "a", MemBytes: 64 * PageSize, DataBytes: 3 * PageSize,
		Runs: []Run{{Page: 1, Count: 2}, {Page: 9, Count: 1, Offset: 2 * PageSize}}}
	for _, m := range []*Meta{full, delta} {
		b, _ := m.encode()
		f.Add(b[:len(b)-sumSize])
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		s := sha256.Sum256(body)
		b := append(body[:len(body):len(body)], s[:]...)
		m, sum, err := decode(b)
		if err != nil {
			return
		}
		b2, sum2 := m.encode()
		if string(b2) != string(b) || sum2 != sum {
			t.Errorf("decode then encode changed the meta")
		}
	})
}
