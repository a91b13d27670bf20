"""Neutral wire models shared by roles. Pydantic only; imports nothing else of nexus."""
