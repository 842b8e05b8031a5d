package workspace

import (
	"slices"
	"unicode/utf8"

	"github.com/sandpit-dev/sandpit"
)

// Bounds of the change list a run returns (it goes to the model in the run's
// result, and into its history row): at most MaxListed paths in at most
// MaxListedBytes of JSON, over all lists; the counts cover everything.
const (
	MaxListed      = 1000
	MaxListedBytes = 64 << 10
)

const (
	lCreated = iota
	lModified
	lDeleted
	lDropped
	nLists
)

// changeList collects a merge's changes. Each list keeps at most the whole
// budget while the merge runs (so memory is bounded whatever the run did);
// changes shares the budget among them.
type changeList struct {
	paths   [nLists][]string
	reasons []string // of paths[lDropped]
	size    [nLists]int
	count   [nLists]int
	bytes   int64
}

func (c *changeList) add(l int, p, reason string) {
	c.count[l]++
	n := entryJSONLen(p, reason)
	if len(c.paths[l]) >= MaxListed || c.size[l]+n > MaxListedBytes {
		return
	}
	c.paths[l] = append(c.paths[l], p)
	c.size[l] += n
	if l == lDropped {
		c.reasons = append(c.reasons, reason)
	}
}

func (c *changeList) created(p string)      { c.add(lCreated, p, "") }
func (c *changeList) modified(p string)     { c.add(lModified, p, "") }
func (c *changeList) deleted(p string)      { c.add(lDeleted, p, "") }
func (c *changeList) drop(p, reason string) { c.add(lDropped, p, reason) }

// changes shares the budget among the lists, one path from each in turn,
// and sorts what is kept.
func (c *changeList) changes() *sandpit.Changes {
	var next [nLists]int
	total, size := 0, 0
	for more := true; more; {
		more = false
		for l := range nLists {
			if next[l] >= len(c.paths[l]) {
				continue
			}
			reason := ""
			if l == lDropped {
				reason = c.reasons[next[l]]
			}
			n := entryJSONLen(c.paths[l][next[l]], reason)
			if total+1 > MaxListed || size+n > MaxListedBytes {
				more = false
				break
			}
			next[l]++
			total, size = total+1, size+n
			more = true
		}
	}
	ch := &sandpit.Changes{
		Created:       sorted(c.paths[lCreated][:next[lCreated]]),
		Modified:      sorted(c.paths[lModified][:next[lModified]]),
		Deleted:       sorted(c.paths[lDeleted][:next[lDeleted]]),
		CreatedCount:  c.count[lCreated],
		ModifiedCount: c.count[lModified],
		DeletedCount:  c.count[lDeleted],
		DroppedCount:  c.count[lDropped],
		BytesWritten:  c.bytes,
	}
	for i := range next[lDropped] {
		ch.Dropped = append(ch.Dropped, sandpit.DroppedPath{Path: c.paths[lDropped][i], Reason: c.reasons[i]})
	}
	slices.SortFunc(ch.Dropped, func(a, b sandpit.DroppedPath) int { return cmpString(a.Path, b.Path) })
	for l := range nLists {
		if next[l] < c.count[l] {
			ch.Truncated = true
		}
	}
	return ch
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func sorted(s []string) []string {
	out := slices.Clone(s)
	if out == nil {
		out = []string{}
	}
	slices.Sort(out)
	return out
}

// entryJSONLen is what one listed path adds to the change list's JSON.
func entryJSONLen(p, reason string) int {
	n := jsonLen(p) + 1 // the comma
	if reason != "" {
		n += jsonLen(reason) + len(`{"path":,"reason":}`)
	}
	return n
}

// jsonLen is the length of s as a JSON string from encoding/json (which
// escapes control characters, <, > and &, and invalid UTF-8).
func jsonLen(s string) int {
	n := 2
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			n += 6
		case r == '"' || r == '\\' || r == '\n' || r == '\r' || r == '\t':
			n += 2
		case r < 0x20 || r == '<' || r == '>' || r == '&' || r == '\u2028' || r == '\u2029':
			n += 6
		default:
			n += size
		}
		i += size
	}
	return n
}
