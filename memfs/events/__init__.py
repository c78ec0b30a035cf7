"""Change events: what a mount hears of changes made elsewhere, and what it tells others.

Sources (an SQS queue fed by S3 or SNS; an AMQP exchange fed by memfs mounts and, where it is
safe, by the S3 server), decoding into one shape (``change.Change``), announcing a mount's own
completed writes, and ``memfs events setup``. Nothing here knows FUSE or the mount's core: the
mount's part (an event as a hint: drop what it knew, tell the kernel, tell watchers) lives in
``memfs.mount``. An event never carries truth (S3 does): losing, repeating or reordering one
costs a request or a TTL, never a wrong answer.

| module | owns |
|---|---|
| ``change`` | the one ``Change`` shape, ``FeedState``, the ``Feed`` protocol |
| ``decode`` | every producer's message → ``Change`` (S3, SNS, EventBridge, RGW, memfs's own) |
| ``base`` | what every engine does alike: health, delivery, counters, backoff, the outbox |
| ``sqs`` | a feed from one SQS queue (its requests are in ``memfs.s3.queues``) |
| ``amqp`` | a feed over an AMQP 0-9-1 topic exchange (RabbitMQ), with pika |
| ``feeds`` | ``--events SPEC`` → a feed: ``open_feed`` |
"""
