"""Spark data source tests: real local Spark, real broker process."""
