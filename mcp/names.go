package mcp

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Names in text content. File names, snapshot descriptions, database,
// table and column names come from programs and callers sandpit does not
// trust. Printed raw, a newline in a name makes a second, fake entry, an
// escape sequence drives the terminal that shows the text, and a bidi
// override (U+202E) or an isolate reverses what follows it. Text content
// prints every such name through textName (textNames for a list, textLine
// for free text on one line); structured content keeps the exact value,
// which JSON escapes as it must.

// textName returns name as text content prints it: unchanged when every
// character is printable (strconv.IsPrint: letters, marks, numbers,
// punctuation, symbols and the ASCII space), it neither starts nor ends with
// a space and does not start with a double quote; otherwise Go-quoted, with
// control characters, invalid UTF-8 and format characters (bidi marks,
// overrides and isolates U+200E-200F, U+202A-202E, U+2066-2069, zero-width
// characters, U+FEFF, tag characters) as escapes: "a\nb", "\x1b[2J",
// "\u202etxt.exe". A quoted name always starts with a double quote and a
// raw one never does, so neither passes for the other.
func textName(name string) string {
	if needsQuote(name, "") {
		return strconv.Quote(name)
	}
	return name
}

// listSpecials are the characters that separate or bracket names in a list
// printed by textNames.
const listSpecials = " [],"

// textNames prints a list of names on one line, as fmt prints a slice:
// [a.txt b.txt "with space"]. A name holding a space, a bracket or a comma
// is quoted too, so the list's punctuation is always its own.
func textNames(names []string) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, n := range names {
		if i > 0 {
			b.WriteByte(' ')
		}
		if needsQuote(n, listSpecials) {
			b.WriteString(strconv.Quote(n))
		} else {
			b.WriteString(n)
		}
	}
	b.WriteByte(']')
	return b.String()
}

func needsQuote(s, specials string) bool {
	if s == "" || s[0] == '"' || s[0] == ' ' || s[len(s)-1] == ' ' || strings.ContainsAny(s, specials) {
		return true
	}
	for _, r := range s {
		if r == utf8.RuneError || !strconv.IsPrint(r) {
			return true // invalid UTF-8 decodes as RuneError; a real U+FFFD is quoted too, harmlessly
		}
	}
	return false
}

// textLine returns s with every character textName would escape replaced by
// its escape (\n, \x1b, \u202e, \xff), and nothing else changed: for free
// text that must stay on one line and show what it holds, such as a code
// preview or a validator's message quoting a document's keys.
func textLine(s string) string {
	var b strings.Builder
	escaped := false // b holds s up to i, escaped
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		printable := strconv.IsPrint(r) && !(r == utf8.RuneError && size == 1)
		if !printable && !escaped {
			b.WriteString(s[:i])
			escaped = true
		}
		switch {
		case !escaped:
		case printable:
			b.WriteRune(r)
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		default:
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		}
		i += size
	}
	if !escaped {
		return s
	}
	return b.String()
}

// textLines is textLine for each line of s: line breaks stay, everything
// else textName would escape is escaped. For messages of several lines
// that quote what sandpit did not write, such as an SQLite error naming a
// table.
func textLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = textLine(l)
	}
	return strings.Join(lines, "\n")
}

// Program output in text content. What a program prints (its stdout and
// stderr, a session's value) is not one name but many lines, and it could
// print lines that read as the server's own: "status: success", a section
// header, a workspace line. Text content prints it through writeFenced:
// every line after fence, which the server's own lines never start with,
// so no line of output stands at the server's level; control characters
// (CR, ESC, NUL...), the Unicode line and paragraph separators and bidi
// marks are escaped as textLine escapes them, tabs are kept. Structured
// content keeps the exact bytes.

// fence starts every line of program-written text in text content.
const fence = "| "

// writeFenced writes s to b, each line after fence and ending in a
// newline. An empty line is the fence alone, without its space.
func writeFenced(b *strings.Builder, s string) {
	if s == "" {
		return
	}
	for _, line := range strings.Split(strings.TrimSuffix(s, "\n"), "\n") {
		if line == "" {
			b.WriteString(strings.TrimSpace(fence) + "\n")
			continue
		}
		b.WriteString(fence)
		for i, part := range strings.Split(line, "\t") {
			if i > 0 {
				b.WriteByte('\t')
			}
			b.WriteString(textLine(part))
		}
		b.WriteByte('\n')
	}
}
