package querydb

import (
	"fmt"
	"strings"
)

// splitStatement finds the single statement in sql the way SQLite's
// tokenizer (tokenize.c) would: it skips comments, string literals, quoted
// identifiers and TCL-style variables such as $a(x;y), so that a ';' is
// only a separator where SQLite would treat it as one. It returns the
// statement without its terminating ';' and the first keyword, upper-cased.
//
// Anything after the first separator must be whitespace or comments; else
// the result is ErrMultipleStatements. The guard is deliberately one-sided:
// where it cannot match SQLite exactly (the body of CREATE TRIGGER, which is
// refused anyway) it splits too eagerly and refuses, never the other way.
// Even if it were wrong, Query prepares only the first statement and never
// executes a tail; the guard exists to refuse with a clear reason rather
// than silently drop text.
func splitStatement(sql string) (stmt, keyword string, err error) {
	if strings.IndexByte(sql, 0) >= 0 {
		// sqlite3_prepare stops at a NUL: text after it would be ignored.
		return "", "", fmt.Errorf("%w: the SQL contains a NUL byte", ErrRefused)
	}
	end := -1 // index of the first separating ';'
	tokens := 0
	for i := 0; i < len(sql) && end < 0; {
		n, kind := nextToken(sql[i:])
		switch kind {
		case tokSpace, tokComment:
		case tokSemicolon:
			end = i
		default:
			if tokens == 0 && kind == tokIdent {
				keyword = strings.ToUpper(sql[i : i+n])
			}
			tokens++
		}
		i += n
	}
	if tokens == 0 {
		return "", "", fmt.Errorf("%w: the SQL is empty (only whitespace, comments or ';')", ErrEmpty)
	}
	if end < 0 {
		return sql, keyword, nil
	}
	for i := end + 1; i < len(sql); {
		n, kind := nextToken(sql[i:])
		if kind != tokSpace && kind != tokComment && kind != tokSemicolon {
			return "", "", fmt.Errorf("%w: found more SQL after the ';' that ends the first statement (at byte %d); send one statement per call", ErrMultipleStatements, i)
		}
		if kind == tokSemicolon {
			// "SELECT 1;;" is two statements to SQLite only if the second
			// is non-empty; an empty one is harmless, but keep it strict.
			return "", "", fmt.Errorf("%w: more than one ';' at the end; send exactly one statement", ErrMultipleStatements)
		}
		i += n
	}
	return sql[:end], keyword, nil
}

type tokenKind int

const (
	tokSpace tokenKind = iota
	tokComment
	tokSemicolon
	tokIdent
	tokOther // literals, quoted identifiers, variables, numbers, operators
)

// nextToken returns the length and kind of the token at the start of s,
// which is non-empty. Unterminated comments, strings and identifiers run to
// the end of s, as in SQLite (which then reports a syntax error).
func nextToken(s string) (int, tokenKind) {
	c := s[0]
	switch {
	case isTokenSpace(c):
		n := 1
		for n < len(s) && isTokenSpace(s[n]) {
			n++
		}
		return n, tokSpace
	case c == '-' && len(s) > 1 && s[1] == '-':
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			return i + 1, tokComment
		}
		return len(s), tokComment
	case c == '/' && len(s) > 2 && s[1] == '*':
		// A lone "/*" at the very end is a '/' operator to SQLite.
		if i := strings.Index(s[2:], "*/"); i >= 0 {
			return i + 4, tokComment
		}
		return len(s), tokComment
	case c == ';':
		return 1, tokSemicolon
	case c == '\'' || c == '"' || c == '`':
		// Doubling the quote escapes it; in SQLite x'..' blobs end at the
		// first quote, which pairs quotes the same way.
		for i := 1; i < len(s); i++ {
			if s[i] == c {
				if i+1 < len(s) && s[i+1] == c {
					i++
					continue
				}
				return i + 1, tokOther
			}
		}
		return len(s), tokOther
	case c == '[':
		if i := strings.IndexByte(s, ']'); i >= 0 {
			return i + 1, tokOther
		}
		return len(s), tokOther
	case c == '$' || c == '@' || c == ':' || c == '#':
		return variableLen(s), tokOther
	case c == '?':
		n := 1
		for n < len(s) && isDigit(s[n]) {
			n++
		}
		return n, tokOther
	case isDigit(c) || (c == '.' && len(s) > 1 && isDigit(s[1])):
		n := 1
		for n < len(s) {
			switch {
			case isIDChar(s[n]) || s[n] == '.':
				if (s[n] == 'e' || s[n] == 'E') && n+2 < len(s) && (s[n+1] == '+' || s[n+1] == '-') && isDigit(s[n+2]) {
					n += 2
				}
				n++
				continue
			}
			break
		}
		return n, tokOther
	case isIDChar(c):
		n := 1
		for n < len(s) && isIDChar(s[n]) {
			n++
		}
		return n, tokIdent
	}
	return 1, tokOther
}

// variableLen mirrors SQLite's TK_VARIABLE rule for $, @, : and #: a run of
// identifier characters, "::" separators, and a TCL-style "(...)" suffix
// that ends at ')' or whitespace and may hold any other character, ';'
// included.
func variableLen(s string) int {
	n, i := 0, 1
	for ; i < len(s); i++ {
		c := s[i]
		switch {
		case isIDChar(c):
			n++
			continue
		case c == '(' && n > 0:
			i++
			for i < len(s) && !isSpace(s[i]) && s[i] != ')' {
				i++
			}
			if i < len(s) && s[i] == ')' {
				i++
			}
			return i
		case c == ':' && i+1 < len(s) && s[i+1] == ':':
			i++
			continue
		}
		break
	}
	return i
}

// isSpace is SQLite's sqlite3Isspace: space, \t, \n, \v, \f, \r.
func isSpace(c byte) bool { return c == ' ' || (c >= '\t' && c <= '\r') }

// isTokenSpace is the tokenizer's whitespace class, which leaves out \v.
func isTokenSpace(c byte) bool { return c != '\v' && isSpace(c) }
func isDigit(c byte) bool      { return c >= '0' && c <= '9' }

// isIDChar is SQLite's IdChar: letters, digits, '_', '$' and every byte of a
// multi-byte UTF-8 sequence.
func isIDChar(c byte) bool {
	return c >= 0x80 || c == '_' || c == '$' || isDigit(c) || (c|0x20 >= 'a' && c|0x20 <= 'z')
}
