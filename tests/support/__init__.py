"""The test and benchmark harness, kept out of the wheel: the counting/fault-injecting S3 proxy
(`s3proxy`), scripted agents for the reliability suite (`agents`, `reliability_run`) and the
pjdfstest runner (`posix_run`). ``bench/`` and ``scripts/reliability`` import it from the
repository root."""
