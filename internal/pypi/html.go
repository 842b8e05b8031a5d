package pypi

import (
	"html"
	"strings"
)

// anchor is one <a> element of a PEP 503 page: its attributes (names in
// lower case, values unescaped) and its text.
type anchor struct {
	attrs map[string]string
	text  string
}

// anchors finds the <a> elements of page, at most max+1 of them (one more
// than allowed tells the caller the page is over its bound). It is a
// scanner, not an HTML parser: a PEP 503 page is a list of anchors, and
// whatever else a page holds is skipped. Attribute values may be quoted
// with either quote or bare.
func anchors(page []byte, max int) []anchor {
	s := string(page)
	lower := asciiLower(s)
	var out []anchor
	for i := 0; i < len(s) && len(out) <= max; {
		j := strings.IndexByte(s[i:], '<')
		if j < 0 {
			break
		}
		i += j
		if strings.HasPrefix(s[i:], "<!--") {
			k := strings.Index(s[i+4:], "-->")
			if k < 0 {
				break
			}
			i += 4 + k + 3
			continue
		}
		k := i + 1
		if k+1 >= len(s) || lower[k] != 'a' || !(isSpaceByte(s[k+1]) || s[k+1] == '>' || s[k+1] == '/') {
			i++
			continue
		}
		attrs, end := parseAttrs(s, k+1)
		if end < 0 {
			break
		}
		closing := strings.Index(lower[end:], "</a")
		if closing < 0 {
			closing = len(s) - end
		}
		out = append(out, anchor{attrs: attrs, text: strings.TrimSpace(html.UnescapeString(stripTags(s[end : end+closing])))})
		i = end + closing
	}
	return out
}

// parseAttrs reads attributes from s[i:] up to the tag's '>', returning
// them and the index after '>' (-1 when the tag never ends).
func parseAttrs(s string, i int) (map[string]string, int) {
	attrs := map[string]string{}
	for i < len(s) {
		for i < len(s) && (isSpaceByte(s[i]) || s[i] == '/') {
			i++
		}
		if i >= len(s) {
			break
		}
		if s[i] == '>' {
			return attrs, i + 1
		}
		start := i
		for i < len(s) && !isSpaceByte(s[i]) && s[i] != '=' && s[i] != '>' && s[i] != '/' {
			i++
		}
		name := asciiLower(s[start:i])
		if i == start { // a stray '='
			i++
			continue
		}
		for i < len(s) && isSpaceByte(s[i]) {
			i++
		}
		val := ""
		if i < len(s) && s[i] == '=' {
			i++
			for i < len(s) && isSpaceByte(s[i]) {
				i++
			}
			if i < len(s) && (s[i] == '"' || s[i] == '\'') {
				q := s[i]
				end := strings.IndexByte(s[i+1:], q)
				if end < 0 {
					return nil, -1
				}
				val = s[i+1 : i+1+end]
				i += end + 2
			} else {
				vs := i
				for i < len(s) && !isSpaceByte(s[i]) && s[i] != '>' {
					i++
				}
				val = s[vs:i]
			}
		}
		if _, dup := attrs[name]; !dup {
			attrs[name] = html.UnescapeString(val)
		}
	}
	return nil, -1
}

// stripTags drops markup inside an anchor's text (<a ...><span>x</span></a>).
func stripTags(s string) string {
	if !strings.Contains(s, "<") {
		return s
	}
	var b strings.Builder
	in := false
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '<':
			in = true
		case s[i] == '>' && in:
			in = false
		case !in:
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

func isSpaceByte(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' }

// asciiLower lower-cases ASCII letters only, so byte offsets stay put
// (strings.ToLower may change the length of non-ASCII text).
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
