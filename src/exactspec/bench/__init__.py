"""Things users run and read: the demo, the benchmark, its calibration and report."""
