//go:build race

package version

// raceEnabled: this test binary has the race detector.
const raceEnabled = true
