package fingerprint

// kind is the type of a JSON value.
type kind uint8

const (
	kindNull kind = iota
	kindFalse
	kindTrue
	kindNumber
	kindString
	kindArray
	kindObject
)

// value is a parsed JSON value. A number is kept as the float64 nearest to
// it, because RFC 8785 defines its canonical form by that float64 alone;
// where that form would not denote the number exactly, str holds the exact
// form instead (see numberValue).
type value struct {
	kind    kind
	num     float64  // kindNumber: the nearest float64, ±Inf beyond the range
	str     string   // kindString, decoded; kindNumber, the exact form or ""
	elems   []value  // kindArray
	members []member // kindObject, in input order until sorted for output
}

// member is one name/value pair of an object.
type member struct {
	name string // decoded
	off  int    // byte offset of the name's opening quote, for errors found after parsing
	val  value
}
