"""Every request memfs sends to S3, and nothing outside this package sends one or imports boto3.

| module | owns |
|---|---|
| ``client`` | how boto3 clients are made (retries, timeouts, pool, path style, timestamps) |
| ``store`` | the mount's view: paths to keys, conditional PUT/GET/COPY/DELETE, listings, probes |
| ``transfer`` | big objects: ranged GETs, multipart uploads and their cleanup |
| ``direct`` | PUT/COPY/DELETE/GET sent beside boto3 at a third of its CPU, as botocore sends them |
| ``route`` | decided once at mount: the bucket's region, the clients for it, direct or boto3 |
| ``http1`` | the HTTP/1.1 keep-alive client those direct requests go out on |
| ``filebody`` | a staging file's bytes as a PUT body (``sendfile`` directly, a reader for boto3) |
| ``sigv4`` | their Signature V4 signer (botocore's ``S3SigV4Auth`` at an eighth of the CPU) |
| ``bucket`` | the operator tools' view: raw keys, versions, batch deletes, restoring copies |
| ``objectmeta`` | s3fs-compatible object metadata (mode, uid, gid, mtime) both ways |
| ``stats`` | request counters and latencies by operation (``memfs status``) |
| ``queues`` | the change feed's SQS polls and deletes, its SNS announcements (``memfs.events``) |
| ``errors`` | S3 failures as errno (`StoreError`) for the mount and one line for operators |
"""
