"""The core every package may import: user errors, plug-in lookup, cache paths, strict JSONL
and YAML files. Nothing here imports beyond the standard library, but for PyYAML (yamlfile)."""
