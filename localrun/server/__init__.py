"""The daemon: an ASGI app with one sub-package per API dialect, a model manager, one generation path."""
