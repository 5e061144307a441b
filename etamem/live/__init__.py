"""A space held live in memory (`space`): its residency budget, the derived files and the
snapshot that make opening fast, the change log that follows other processes' writes, and
re-encoding with other models (`reindex`)."""
