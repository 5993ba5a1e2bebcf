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

// value is a parsed JSON value. Numbers are kept as the float64 they denote,
// because RFC 8785 defines their canonical form by that float64 alone.
type value struct {
	kind    kind
	num     float64  // kindNumber
	str     string   // kindString, decoded
	elems   []value  // kindArray
	members []member // kindObject, in input order until sorted for output
}

// member is one name/value pair of an object.
type member struct {
	name string // decoded
	off  int    // byte offset of the name's opening quote, for errors found after parsing
	val  value
}
