"""The analysis layer: pure functions of recorded runs (throughput, throttling detection, the
quota model, typed reports). No I/O."""
