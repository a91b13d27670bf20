"""Identity: users, sessions, tokens, OAuth2 server, delegation, SecurityEpoch (in Runtime)."""
