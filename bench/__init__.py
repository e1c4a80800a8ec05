"""Benchmarks that print figures: requests per operation, modeled dollars, throughput ratios."""
