"""Records: ids, coercion and validation per field type, the mutation and read pipelines."""
