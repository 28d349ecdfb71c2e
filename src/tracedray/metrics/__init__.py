"""Metrics, the third pillar: Prometheus endpoints on every raylet and the GCS, a file_sd
discovery file in the session folder, users' own metrics, and OTLP.

Every number is read at scrape time from the components' own ``statistics()`` and
``GetNodeStats`` (the same source ``tracedray status`` shows): nothing is counted twice
on a hot path. See docs/metrics.md.
"""
