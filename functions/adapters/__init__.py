"""AWS adapters shared by several handlers: clients, observability, data access.

Layering: handlers -> logic -> adapters -> keydesign. Nothing here imports a
handler or a logic module.
"""
