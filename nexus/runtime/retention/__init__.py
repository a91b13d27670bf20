"""Runtime's retention: what the period has outlived is deleted in bounded batches
(`service`, the statements in `repository`)."""
