package timeline

import "testing"

func TestMonotonicIsTheKernelsClockMonotonic(t *testing.T) {
	for i := 0; i < 100; i++ {
		before := syscallMonotonic()
		mono := Monotonic()
		after := syscallMonotonic()
		if mono < before || mono > after {
			t.Fatalf("Monotonic %d outside the system call's readings [%d, %d]", mono, before, after)
		}
	}
}
