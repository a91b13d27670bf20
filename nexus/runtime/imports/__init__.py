"""CSV imports: a background job creating or upserting records as the uploading user."""
