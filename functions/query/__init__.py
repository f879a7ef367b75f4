"""The query Lambda: the REST API that reads readings back (see ``api.py`` for the routes)."""
