"""sfcrm: the Salesforce-dialect App (package + AppService)."""
