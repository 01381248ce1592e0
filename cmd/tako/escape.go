package main

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// escapeControl makes a line a worker wrote safe to print on a terminal:
// every control character but tab (C0, DEL, C1), the bidirectional
// overrides and invalid UTF-8 are written as escapes (\n, \r, \x1b,
// \u202e), so a worker can neither send escape sequences to the user's
// terminal nor forge a line of its own that looks like tako's or the
// host's. A backslash stays as it is: the output is for reading, not for
// parsing (-output json is for parsing).
func escapeControl(s string) string {
	clean := true
	for _, r := range s {
		if needsEscape(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 && r != '\t' || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case needsEscape(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

func needsEscape(r rune) bool {
	switch {
	case r == '\t':
		return false
	case r < 0x20, r == 0x7f, r >= 0x80 && r <= 0x9f:
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x200e, r == 0x200f:
		return true
	case r == utf8.RuneError:
		return true
	}
	return false
}
