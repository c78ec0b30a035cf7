"""``memfs demo``: an agent remembers across two sessions through S3, with nothing to configure.

What it does, printing every step:

1. S3: with no bucket given, starts moto's S3 server on 127.0.0.1 (a child process) and creates a
   bucket; with ``--bucket``/``MEMFS_BUCKET`` (plus credentials from boto3's usual chain, and
   optionally the endpoint, region and prefix options or their ``MEMFS_*`` twins) it uses that
   bucket instead, under a fresh ``memfs-demo/<id>/`` prefix unless a prefix is given.
2. Session one: ``memfs mount`` on a temporary directory, then the real ``anthropic`` SDK's
   ``tool_runner`` with :class:`memfs.memory.MemoryTool` talks to a scripted stand-in for the
   Messages API on loopback (``stub_messages``; no API key, no network). The
   "model" stores facts with the memory tool. Then ``memfs umount``: nothing is left locally.
3. Session two: a fresh mount, a new client and runner. The model looks in its memory, and its
   final answer is composed from the tool results it actually received, so a failed recall shows.
4. ``ls -la`` and ``cat`` of the memories, the S3 object keys, then unmount and clean up — or, with
   ``--keep``, leave everything running and print how to explore and how to stop it.

Exit status 0 only if every step worked. Modules: ``story`` (what the user and the scripted
model say), ``stub_messages`` (the Messages API stand-in), ``run`` (the steps). The command line
is ``memfs.cli.demo``. Needs the ``demo`` extra (``anthropic``, ``moto[server]``) at run time.
"""
