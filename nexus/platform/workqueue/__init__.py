"""The durable work engine: fenced WorkItems claimed by compare-and-set, lanes, retries,
dead letters and work-family ownership. One engine; each user brings its own tables."""
