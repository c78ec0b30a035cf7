"""memfs: persistent, shared, inspectable memory for Claude agents (FUSE over S3)."""
__version__ = "0.1.0"
