"""What the latency and throughput objectives share: the costed instance, the method registry and run,
the time budget, SA and EA, list scheduling, SPLIT's modules, CP-SAT ticks and the output files' common
parts."""
