"""Benchmark scripts behind ``searchsmith profile``; each compares with a baseline in the same run."""
