"""The dependency-free core every package may import: user errors, plug-in lookup, cache paths,
strict JSONL files. Nothing here imports beyond the standard library."""
