"""`scripts/bench`: memfs against the direct-boto3 floor and its peers (s3fs-fuse, rclone).

One invocation starts one moto server and one counting proxy (tests.support.s3proxy), then runs
each workload on each leg at each modelled round trip. Modules: ``targets`` (moto, buckets and
mounts), ``workloads`` (what is run and how it is measured), ``report`` (tables and JSON),
``png`` (a dependency-free chart), ``run`` (command line and orchestration).
"""
