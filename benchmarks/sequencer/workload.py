"""What the sequencer benchmarks share: the collection they write, the
writer count, and the watermark of the feed the commit-ordered one is
compared with."""

COLLECTION = "tenders"
#: Writer threads of the throughput figure (as many as the race experiment's).
WRITERS = 8
#: The watermark of the feed the commit-ordered feed is compared with.
WATERMARK = 1.0
