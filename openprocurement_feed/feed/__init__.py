"""The request path: a feed's parameters, its view and links, the renderers,
the route's placement, the tweens, the error views and the OpenAPI paths.

May import ``openprocurement_feed.store``, ``openprocurement_feed.longpoll``
and ``openprocurement_feed.settings``; never the commit follower or operations.
"""
