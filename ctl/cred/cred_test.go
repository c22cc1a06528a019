package cred

import (
	"context"
	"testing"
)

func TestCred(t *testing.T) {
	alice := Cred{UID: 4001, GID: 4001}
	bob := Cred{UID: 4002, GID: 4002, Groups: func() []uint32 { return []uint32{4242} }}
	if c := Of(context.Background()); c.Owner() != Self().Owner() || !c.Privileged() {
		t.Errorf("Of(no cred) = %v; want the process's own, privileged", c)
	}
	if c := Of(With(context.Background(), alice)); c.Owner() != alice.Owner() {
		t.Errorf("Of(With(alice)) = %v; want %v", c, alice)
	}
	if alice.Privileged() || !(Cred{}).Privileged() {
		t.Error("Privileged: want root only (and the process's own user)")
	}
	if !bob.InGroup(4002) || !bob.InGroup(4242) || bob.InGroup(4001) || alice.InGroup(4242) {
		t.Error("InGroup: want the gid and the supplementary groups only")
	}
}
