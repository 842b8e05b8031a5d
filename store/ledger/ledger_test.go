package ledger

import (
	"strings"
	"testing"
)

func TestLedger(t *testing.T) {
	dir := t.TempDir()
	tenantDir := func(tenant string) string { return dir + "/" + tenant + "/sessions" }
	a, b := New(tenantDir, "node node-a"), New(tenantDir, "node node-b")

	if err := a.Record("alice", "s1"); err != nil {
		t.Fatal(err)
	}
	if why := a.Lost("alice", "s1"); why != "" {
		t.Errorf("the holder itself sees its session lost: %q", why)
	}
	if why := b.Lost("bob", "s1"); why != "" {
		t.Errorf("another tenant's session of the same name: %q", why)
	}
	why := b.Lost("alice", "s1")
	if !strings.Contains(why, "node node-a") || !strings.Contains(why, "node node-b") || !strings.Contains(why, "files are kept") {
		t.Errorf("lost elsewhere: %q, want where it lived, where it is now and what is kept", why)
	}
	if again := b.Lost("alice", "s1"); again != "" {
		t.Errorf("reported twice: %q; the next call starts afresh", again)
	}

	// A session ended with the caller told (closed, idle) is forgotten.
	a.Record("alice", "s2")
	a.Forget("alice", "s2")
	if why := b.Lost("alice", "s2"); why != "" {
		t.Errorf("a forgotten session reported lost: %q", why)
	}
	// Forget never removes another server's record.
	b.Record("alice", "s3")
	a.Forget("alice", "s3")
	if why := a.Lost("alice", "s3"); why == "" {
		t.Error("a's Forget removed b's record")
	}
	// Names with separators or dots stay inside the dir.
	if err := a.Record("alice", "../../x"); err != nil {
		t.Fatal(err)
	}
	if why := b.Lost("alice", "../../x"); why == "" {
		t.Error("a name with separators not recorded where it is looked up")
	}
}
