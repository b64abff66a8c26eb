"""The development database server (SecantusDB) run as a child process, and
the guard that removes its folder when it exits.

Imports nothing of the package: tests, demos and benchmarks start it.
"""
