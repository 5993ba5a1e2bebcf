package fingerprint

import (
	"errors"
	"math"
	"strconv"
	"strings"
)

// ExactNumber is a number whose canonical form deviates from RFC 8785:
// RFC 8785 would write the float64 nearest to it, which has another value,
// so Canonicalize writes its exact decimal instead.
type ExactNumber struct {
	// Pointer locates the number in the document (RFC 6901).
	Pointer string
	// Exact is the number's canonical form, which denotes its value.
	Exact string
	// RFC8785 is the form RFC 8785 gives it, or "" for a number beyond
	// the float64 range, which RFC 8785 rejects.
	RFC8785 string
}

// ExactNumbers parses data as strict JSON, as Canonicalize does, and
// returns the numbers in it whose canonical form deviates from RFC 8785,
// in document order. Given the output of Canonicalize, it explains that
// output; it returns nothing for JSON that RFC 8785 canonicalizes the
// same way.
func ExactNumbers(data []byte) ([]ExactNumber, error) {
	v, err := parse(data)
	if err != nil {
		if se, ok := errors.AsType[*SyntaxError](err); ok {
			se.locate(data)
		}
		return nil, err
	}
	var found []ExactNumber
	var walk func(v *value, ptr string)
	walk = func(v *value, ptr string) {
		switch v.kind {
		case kindNumber:
			if v.str == "" {
				return
			}
			n := ExactNumber{Pointer: ptr, Exact: v.str}
			if !math.IsInf(v.num, 0) {
				n.RFC8785 = string(appendNumber(nil, v.num))
			}
			found = append(found, n)
		case kindArray:
			for i := range v.elems {
				walk(&v.elems[i], ptr+"/"+strconv.Itoa(i))
			}
		case kindObject:
			for i := range v.members {
				m := &v.members[i]
				walk(&m.val, ptr+"/"+escapeToken(m.name))
			}
		}
	}
	walk(&v, "")
	return found, nil
}

// escapeToken escapes a member name for a JSON Pointer (RFC 6901).
func escapeToken(name string) string {
	return strings.ReplaceAll(strings.ReplaceAll(name, "~", "~0"), "/", "~1")
}
