"""The store and the two orders: the store mixin and the host's store, the
offset codec, the watermark and commit readers, the listing an entry
carries and the restricted objects' masks.

Never sees HTTP: may import ``openprocurement_feed.settings`` only.
"""
