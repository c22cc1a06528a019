package client

import "testing"

func TestParseEndpoint(t *testing.T) {
	e, err := ParseEndpoint("tcp:127.0.0.1:5640\n/repo/build/lab/token\n")
	if err != nil || e.Addr != "tcp:127.0.0.1:5640" || e.TokenFile != "/repo/build/lab/token" {
		t.Fatalf("ParseEndpoint = %+v, %v", e, err)
	}
	if e, err := ParseEndpoint("unix:/s.sock\n"); err != nil || e.TokenFile != "" {
		t.Fatalf("ParseEndpoint(unix) = %+v, %v", e, err)
	}
	for _, bad := range []string{"", "127.0.0.1:5640\n", "tcp:a\nb\nc\n"} {
		if _, err := ParseEndpoint(bad); err == nil {
			t.Errorf("ParseEndpoint(%q) accepted", bad)
		}
	}
}
