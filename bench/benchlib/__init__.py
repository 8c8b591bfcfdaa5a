"""Benchmark suite of linattn (see bench/README.md). Library behind bench/run_benchmarks.py."""
