"""The hot -> cold tier: which CommitLog segments are sealed, where the lake lives, what is
already in it (the manifest), whether it is verified, and when local files may go.

No Spark here: the Spark jobs that move the bytes live in :mod:`lakemq.jobs`.
"""
