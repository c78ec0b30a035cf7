"""Test helpers that other parts of memfs (tests, the demo) reuse.

`StubMessagesServer` — a scripted Anthropic Messages API on loopback (see `stub_messages`).
"""

from memfs.testing.stub_messages import StubMessagesServer

__all__ = ["StubMessagesServer"]
