"""Global search: the search index kept in the mutation transaction, and SOSL over it."""
