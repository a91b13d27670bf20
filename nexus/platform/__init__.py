"""Shared mechanisms with no domain: settings, databases, migrations, HTTP, observability."""
