package fingerprint

import (
	"fmt"
	"slices"
	"strconv"
	"sync"
	"unicode/utf16"
	"unicode/utf8"
)

// maxDepth bounds the nesting of arrays and objects, so that hostile input
// cannot exhaust the stack. It is the limit encoding/json uses.
const maxDepth = 10000

// parser is a strict RFC 8259 parser that also enforces what RFC 8785 needs:
// unique keys, valid UTF-8 and paired surrogates.
type parser struct {
	data  []byte
	pos   int
	depth int
	// Children of the arrays and objects being parsed, innermost last;
	// each finished array or object moves its own into one slice of
	// exactly the right size.
	elems   []value
	members []member
}

// parse parses data, which must hold exactly one JSON value, optionally
// surrounded by white space.
func parse(data []byte) (value, error) {
	p := parsers.Get().(*parser)
	defer p.release()
	p.data = data
	if len(data) == 0 {
		return value{}, p.errorf(0, "empty input")
	}
	p.skipSpace()
	v, err := p.value()
	if err != nil {
		return value{}, err
	}
	p.skipSpace()
	if p.pos < len(data) {
		return value{}, p.errorf(p.pos, "invalid character %s after top-level value", p.describe())
	}
	return v, nil
}

// parsers keeps parsers for their scratch (elems, members), which a
// parse leaves empty: the values it returns own copies.
var parsers = sync.Pool{New: func() any { return new(parser) }}

// release empties p (an error leaves children of unfinished values in its
// scratch) and gives it back to parsers, unless its scratch grew large.
func (p *parser) release() {
	clear(p.elems)
	clear(p.members)
	if cap(p.elems) > 1024 || cap(p.members) > 1024 {
		return
	}
	*p = parser{elems: p.elems[:0], members: p.members[:0]}
	parsers.Put(p)
}

func (p *parser) errorf(off int, format string, args ...any) *SyntaxError {
	return &SyntaxError{Offset: int64(off), Msg: fmt.Sprintf(format, args...)}
}

// unexpected reports the byte at p.pos, or the end of input, when something
// else was expected there.
func (p *parser) unexpected(expected string) *SyntaxError {
	if p.pos >= len(p.data) {
		return p.errorf(p.pos, "unexpected end of input, expected %s", expected)
	}
	return p.errorf(p.pos, "invalid character %s, expected %s", p.describe(), expected)
}

// describe names the character at p.pos for an error message.
func (p *parser) describe() string {
	r, size := utf8.DecodeRune(p.data[p.pos:])
	if r == utf8.RuneError && size <= 1 {
		return fmt.Sprintf("(byte 0x%02x, invalid UTF-8)", p.data[p.pos])
	}
	return strconv.QuoteRune(r)
}

func (p *parser) skipSpace() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *parser) value() (value, error) {
	if p.pos >= len(p.data) {
		return value{}, p.unexpected("a JSON value")
	}
	switch c := p.data[p.pos]; {
	case c == '{':
		return p.object()
	case c == '[':
		return p.array()
	case c == '"':
		s, err := p.string()
		return value{kind: kindString, str: s}, err
	case c == '-' || '0' <= c && c <= '9':
		return p.number()
	case c == 't':
		return value{kind: kindTrue}, p.literal("true")
	case c == 'f':
		return value{kind: kindFalse}, p.literal("false")
	case c == 'n':
		return value{kind: kindNull}, p.literal("null")
	}
	return value{}, p.unexpected("a JSON value")
}

func (p *parser) literal(lit string) error {
	for i := 0; i < len(lit); i++ {
		if p.pos >= len(p.data) || p.data[p.pos] != lit[i] {
			return p.unexpected(fmt.Sprintf("%q in literal %s", lit[i], lit))
		}
		p.pos++
	}
	return nil
}

func (p *parser) enter() error {
	p.depth++
	if p.depth > maxDepth {
		return p.errorf(p.pos, "nesting deeper than %d levels", maxDepth)
	}
	return nil
}

func (p *parser) array() (value, error) {
	if err := p.enter(); err != nil {
		return value{}, err
	}
	p.pos++ // '['
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.pos++
		p.depth--
		return value{kind: kindArray, elems: []value{}}, nil
	}
	mark := len(p.elems)
	for {
		p.skipSpace()
		e, err := p.value()
		if err != nil {
			return value{}, err
		}
		p.elems = append(p.elems, e)
		p.skipSpace()
		if p.pos < len(p.data) {
			switch p.data[p.pos] {
			case ',':
				p.pos++
				continue
			case ']':
				p.pos++
				p.depth--
				v := value{kind: kindArray, elems: slices.Clone(p.elems[mark:])}
				clear(p.elems[mark:]) // drop references for the GC
				p.elems = p.elems[:mark]
				return v, nil
			}
		}
		return value{}, p.unexpected("',' or ']' after array element")
	}
}

// linearScanMax is the object size up to which duplicate keys are found by
// comparing with every earlier key rather than through a map.
const linearScanMax = 16

func (p *parser) object() (value, error) {
	if err := p.enter(); err != nil {
		return value{}, err
	}
	p.pos++ // '{'
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == '}' {
		p.pos++
		p.depth--
		return value{kind: kindObject, members: []member{}}, nil
	}
	mark := len(p.members)
	var seen map[string]struct{}
	for {
		p.skipSpace()
		if p.pos >= len(p.data) || p.data[p.pos] != '"' {
			return value{}, p.unexpected("a string for an object key")
		}
		off := p.pos
		name, err := p.string()
		if err != nil {
			return value{}, err
		}
		if isDuplicate(name, p.members[mark:], &seen) {
			return value{}, p.errorf(off, "duplicate key %s", strconv.Quote(name))
		}
		p.skipSpace()
		if p.pos >= len(p.data) || p.data[p.pos] != ':' {
			return value{}, p.unexpected("':' after object key")
		}
		p.pos++
		p.skipSpace()
		val, err := p.value()
		if err != nil {
			return value{}, err
		}
		p.members = append(p.members, member{name: name, off: off, val: val})
		p.skipSpace()
		if p.pos < len(p.data) {
			switch p.data[p.pos] {
			case ',':
				p.pos++
				continue
			case '}':
				p.pos++
				p.depth--
				v := value{kind: kindObject, members: slices.Clone(p.members[mark:])}
				clear(p.members[mark:])
				p.members = p.members[:mark]
				return v, nil
			}
		}
		return value{}, p.unexpected("',' or '}' after object member")
	}
}

// isDuplicate reports whether name is already the name of one of members.
// *seen is built on first need once the object outgrows a linear scan.
func isDuplicate(name string, members []member, seen *map[string]struct{}) bool {
	if len(members) < linearScanMax {
		for i := range members {
			if members[i].name == name {
				return true
			}
		}
		return false
	}
	if *seen == nil {
		*seen = make(map[string]struct{}, 2*len(members))
		for i := range members {
			(*seen)[members[i].name] = struct{}{}
		}
	}
	if _, ok := (*seen)[name]; ok {
		return true
	}
	(*seen)[name] = struct{}{}
	return false
}

// string parses a string starting at its opening quote and returns it
// decoded.
func (p *parser) string() (string, error) {
	start := p.pos
	p.pos++ // '"'
	// Fast path: printable ASCII without escapes.
	for i := p.pos; i < len(p.data); i++ {
		c := p.data[i]
		if c == '"' {
			s := string(p.data[p.pos:i])
			p.pos = i + 1
			return s, nil
		}
		if c < 0x20 || c == '\\' || c >= utf8.RuneSelf {
			break
		}
	}
	buf := make([]byte, 0, 32)
	for {
		if p.pos >= len(p.data) {
			return "", p.errorf(p.pos, "unexpected end of input in string starting at offset %d", start)
		}
		c := p.data[p.pos]
		switch {
		case c == '"':
			p.pos++
			return string(buf), nil
		case c == '\\':
			r, err := p.escape()
			if err != nil {
				return "", err
			}
			buf = utf8.AppendRune(buf, r)
		case c < 0x20:
			return "", p.errorf(p.pos, "invalid control character %U in string (must be escaped)", c)
		case c < utf8.RuneSelf:
			buf = append(buf, c)
			p.pos++
		default:
			r, size := utf8.DecodeRune(p.data[p.pos:])
			if r == utf8.RuneError && size == 1 {
				return "", p.errorf(p.pos, "invalid UTF-8 (byte 0x%02x) in string", c)
			}
			buf = append(buf, p.data[p.pos:p.pos+size]...)
			p.pos += size
		}
	}
}

// escape parses one escape sequence starting at its backslash. A \u escape
// of a high surrogate must be followed by one of a low surrogate; together
// they denote one rune.
func (p *parser) escape() (rune, error) {
	start := p.pos
	if p.pos+1 >= len(p.data) {
		return 0, p.errorf(len(p.data), "unexpected end of input in escape sequence")
	}
	c := p.data[p.pos+1]
	p.pos += 2
	switch c {
	case '"', '\\', '/':
		return rune(c), nil
	case 'b':
		return '\b', nil
	case 'f':
		return '\f', nil
	case 'n':
		return '\n', nil
	case 'r':
		return '\r', nil
	case 't':
		return '\t', nil
	case 'u':
		r, ok := p.hex4()
		if !ok {
			return 0, p.errorf(start, "invalid escape sequence %s (\\u needs four hex digits)", p.excerpt(start, 6))
		}
		switch {
		case utf16.IsSurrogate(r) && r >= 0xDC00:
			return 0, p.errorf(start, "lone surrogate %s in string (low surrogate without a high one)", p.excerpt(start, 6))
		case utf16.IsSurrogate(r):
			if p.pos+1 < len(p.data) && p.data[p.pos] == '\\' && p.data[p.pos+1] == 'u' {
				save := p.pos
				p.pos += 2
				if r2, ok := p.hex4(); ok && 0xDC00 <= r2 && r2 < 0xE000 {
					return utf16.DecodeRune(r, r2), nil
				}
				p.pos = save
			}
			return 0, p.errorf(start, "lone surrogate %s in string (high surrogate not followed by a low one)", p.excerpt(start, 6))
		}
		return r, nil
	}
	p.pos = start + 1
	return 0, p.errorf(start, "invalid escape sequence %s in string", p.excerpt(start, 2))
}

// hex4 parses four hex digits at p.pos.
func (p *parser) hex4() (rune, bool) {
	if p.pos+4 > len(p.data) {
		return 0, false
	}
	var r rune
	for _, c := range p.data[p.pos : p.pos+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	p.pos += 4
	return r, true
}

// excerpt quotes up to n bytes of input from off, for error messages:
// between backquotes if they are printable ASCII, else Go-quoted.
func (p *parser) excerpt(off, n int) string {
	s := string(p.data[off:min(off+n, len(p.data))])
	if strconv.CanBackquote(s) && isASCII(s) {
		return "`" + s + "`"
	}
	return strconv.Quote(s)
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// number parses a number per the RFC 8259 grammar and returns its value:
// see numberValue for how a number that RFC 8785 would round is kept
// exact. Every number the grammar allows has a canonical form, including
// those beyond the float64 range.
func (p *parser) number() (value, error) {
	start := p.pos
	if p.data[p.pos] == '-' {
		p.pos++
	}
	digitsStart := p.pos
	switch {
	case p.pos < len(p.data) && p.data[p.pos] == '0':
		p.pos++
		if p.pos < len(p.data) && isDigit(p.data[p.pos]) {
			return value{}, p.errorf(start, "invalid number: leading zero")
		}
	case p.pos < len(p.data) && isDigit(p.data[p.pos]):
		p.skipDigits()
	default:
		return value{}, p.unexpected("digit in number")
	}
	digits := p.pos - digitsStart
	if p.pos < len(p.data) && p.data[p.pos] == '.' {
		p.pos++
		if p.pos >= len(p.data) || !isDigit(p.data[p.pos]) {
			return value{}, p.unexpected("digit after decimal point")
		}
		fracStart := p.pos
		p.skipDigits()
		digits += p.pos - fracStart
	}
	expLen := 0
	if p.pos < len(p.data) && (p.data[p.pos] == 'e' || p.data[p.pos] == 'E') {
		p.pos++
		if p.pos < len(p.data) && (p.data[p.pos] == '+' || p.data[p.pos] == '-') {
			p.pos++
		}
		if p.pos >= len(p.data) || !isDigit(p.data[p.pos]) {
			return value{}, p.unexpected("digit in exponent")
		}
		expStart := p.pos
		p.skipDigits()
		expLen = p.pos - expStart
	}
	lit := p.data[start:p.pos]
	f, _ := strconv.ParseFloat(string(lit), 64) // ±Inf beyond the range
	// Fast path: with at most 15 significant digits, in the normal range,
	// a decimal is exactly the shortest form of its float64 (DBL_DIG).
	if digits <= 15 && expLen <= 2 {
		return value{kind: kindNumber, num: f}, nil
	}
	return numberValue(lit, f), nil
}

func (p *parser) skipDigits() {
	for p.pos < len(p.data) && isDigit(p.data[p.pos]) {
		p.pos++
	}
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }
