package metrics

import "testing"

func TestOnePeriodPerInterval(t *testing.T) {
	w := NewWaits()
	w.Add(0, 0)
	w.Add(1, 70e6) // one period, 70 ms
	w.Add(1, 70e6)
	w.Add(2, 70e6+20e6) // one period, 20 ms
	if w.Count != 2 || w.SumSeconds < 0.0899 || w.SumSeconds > 0.0901 {
		t.Fatalf("count %d sum %g", w.Count, w.SumSeconds)
	}
	c := w.Cumulative()
	if c[0.01] != 0 || c[0.025] != 1 || c[0.05] != 1 || c[0.075] != 2 {
		t.Fatalf("buckets %v", c)
	}
}

func TestPeriodCountedBeforeItsTime(t *testing.T) {
	w := NewWaits()
	w.Add(5, 100)
	if n := w.Add(6, 100); n != 0 { // the period is counted, its time not yet added
		t.Fatalf("observed %d before the time came", n)
	}
	if n := w.Add(6, 100+60e6); n != 1 {
		t.Fatalf("observed %d", n)
	}
	if w.Cumulative()[0.075] != 1 || w.Cumulative()[0.05] != 0 {
		t.Fatalf("buckets %v", w.Cumulative())
	}
}

func TestSlackTimeCarriedAndTotalsKept(t *testing.T) {
	w := NewWaits()
	w.Add(0, 0)
	w.Add(0, 3e6)      // throttled time without a throttled period: carried
	w.Add(2, 3e6+80e6) // two periods: 83 ms between them
	if w.Count != 2 || w.SumSeconds < 0.0829 || w.SumSeconds > 0.0831 {
		t.Fatalf("count %d sum %g", w.Count, w.SumSeconds)
	}
	if w.Cumulative()[0.05] != 2 || w.Cumulative()[0.025] != 0 {
		t.Fatalf("each should be 41.5 ms: %v", w.Cumulative())
	}
}

func TestCountersGoingBackStartAgain(t *testing.T) {
	w := NewWaits()
	w.Add(10, 10e6)
	w.Add(0, 0) // a new group of the same name
	w.Add(1, 5e6)
	if w.Count != 1 {
		t.Fatalf("count %d", w.Count)
	}
}

// The time can reach cpu.stat before the period is counted: nothing stays pending.
func TestTimeBeforeItsPeriod(t *testing.T) {
	w := NewWaits()
	w.Add(0, 0)
	w.Add(0, 70e6) // the time first
	if n := w.Add(1, 70e6); n != 0 {
		t.Fatalf("observed %d at once: its time might still be coming", n)
	}
	if n := w.Add(1, 70e6); n != 1 || w.Cumulative()[0.075] != 1 || w.Cumulative()[0.05] != 0 {
		t.Fatalf("observed %d, buckets %v", n, w.Cumulative())
	}
}

// A period counted throttled without any throttled time is a wait of 0, after one reading.
func TestThrottledPeriodWithoutTime(t *testing.T) {
	w := NewWaits()
	w.Add(3, 5e6)
	w.Add(4, 5e6)
	if n := w.Add(4, 5e6); n != 1 || w.Cumulative()[0.001] != 1 || w.SumSeconds != 0 {
		t.Fatalf("observed %d, buckets %v", n, w.Cumulative())
	}
}
