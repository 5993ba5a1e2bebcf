//go:build !race

package bench

// raceEnabled: the tests run under the race detector.
const raceEnabled = false
