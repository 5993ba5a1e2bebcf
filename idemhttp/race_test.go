//go:build race

package idemhttp

// raceEnabled: the race detector drops some sync.Pool puts, so pooled
// allocations are not counted.
const raceEnabled = true
