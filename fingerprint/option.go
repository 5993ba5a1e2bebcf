package fingerprint

// Option adjusts what counts as "the same request".
//
// Options take effect in a fixed order whatever order they are given in: NFC
// normalization first, then white space trimming or collapsing, then field
// exclusion (matched against the normalized keys).
type Option func(*config)

// config is the combined effect of a list of Options.
type config struct {
	exclude       []string // as given; parsed by compile
	trimSpace     bool
	collapseSpace bool
	nfc           bool
}

// Exclude drops the field at pointer, an RFC 6901 JSON Pointer such as
// "/params/request_id", before canonicalizing. A reference token "*" matches
// every array element or object member at its level, so "/items/*/id" drops
// the id of every item (and a member literally named "*" is matched only
// through that wildcard). Array elements are matched by their index in the
// input; dropping one shifts the ones after it.
//
// Excluding a path that does not exist is not an error. A pointer that is not
// valid (it must start with "/", and "~" must be followed by "0" or "1")
// makes Canonicalize, Sum and Of return an error wrapping ErrInvalidPointer.
// The empty pointer, which RFC 6901 uses for the whole document, is not
// accepted: excluding everything would give every request the same
// fingerprint.
//
// With NFC, the pointer's tokens are normalized to NFC too, so that they
// match the normalized keys.
func Exclude(pointer string) Option {
	return func(c *config) { c.exclude = append(c.exclude, pointer) }
}

// TrimSpace removes leading and trailing white space (as defined by
// unicode.IsSpace) from every string value. Object keys are left alone.
func TrimSpace() Option {
	return func(c *config) { c.trimSpace = true }
}

// CollapseSpace removes leading and trailing white space from every string
// value and replaces each inner run of white space (as defined by
// unicode.IsSpace) with one ASCII space. Object keys are left alone.
func CollapseSpace() Option {
	return func(c *config) { c.collapseSpace = true }
}

// NFC normalizes every string value and every object key to Unicode
// Normalization Form C, so that "é" written precomposed (U+00E9) or as "e"
// plus a combining accent (U+0065 U+0301) is the same request.
//
// Two keys of one object that differ in the input but are equal after
// normalization are an error (a *SyntaxError at the second key), just like
// duplicate keys in the input, even when one of them is excluded: which
// value was meant cannot be decided.
func NFC() Option {
	return func(c *config) { c.nfc = true }
}

// newConfig applies opts to a zero config.
func newConfig(opts []Option) *config {
	c := new(config)
	for _, o := range opts {
		if o != nil {
			o(c)
		}
	}
	return c
}

// changesTree reports whether c alters a parsed document at all.
func (c *config) changesTree() bool {
	return len(c.exclude) > 0 || c.trimSpace || c.collapseSpace || c.nfc
}
