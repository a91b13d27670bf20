"""SOQL: parsed with Lark, compiled to SQLAlchemy Core with permissions inside the SQL."""
