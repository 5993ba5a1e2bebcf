package fingerprint

import (
	"strconv"
)

// transform applies c to the parsed document v: it normalizes strings and
// keys and drops the excluded fields. ptrs are the exclusion pointers, each
// cut down to the tokens that remain below v.
func (c *config) transform(v *value, ptrs []pointer) error {
	switch v.kind {
	case kindString:
		v.str = c.normalizeValue(v.str)
	case kindArray:
		kept := v.elems[:0]
		for i := range v.elems {
			below, drop := descend(ptrs, func(t token) bool { return t.matchesElement(i) })
			if drop {
				continue
			}
			if err := c.transform(&v.elems[i], below); err != nil {
				return err
			}
			kept = append(kept, v.elems[i])
		}
		v.elems = kept
	case kindObject:
		if c.nfc {
			if err := c.normalizeKeys(v.members); err != nil {
				return err
			}
		}
		kept := v.members[:0]
		for i := range v.members {
			m := &v.members[i]
			below, drop := descend(ptrs, func(t token) bool { return t.matchesMember(m.name) })
			if drop {
				continue
			}
			if err := c.transform(&m.val, below); err != nil {
				return err
			}
			kept = append(kept, *m)
		}
		v.members = kept
	}
	return nil
}

// descend returns the rest of each pointer whose first token matches a
// child, and whether one of them ends at that child (which is then dropped).
func descend(ptrs []pointer, match func(token) bool) (below []pointer, drop bool) {
	for _, p := range ptrs {
		if !match(p[0]) {
			continue
		}
		if len(p) == 1 {
			return nil, true
		}
		below = append(below, p[1:])
	}
	return below, false
}

// normalizeKeys normalizes the names of members, whose names are distinct,
// and reports two that became equal as a duplicate key.
func (c *config) normalizeKeys(members []member) error {
	changed := false
	for i := range members {
		if n := c.normalizeKey(members[i].name); n != members[i].name {
			members[i].name, changed = n, true
		}
	}
	if !changed {
		return nil
	}
	seen := make(map[string]struct{}, len(members))
	for _, m := range members {
		if _, dup := seen[m.name]; dup {
			return &SyntaxError{
				Offset: int64(m.off),
				Msg:    "duplicate key " + strconv.Quote(m.name) + " after NFC normalization",
			}
		}
		seen[m.name] = struct{}{}
	}
	return nil
}
