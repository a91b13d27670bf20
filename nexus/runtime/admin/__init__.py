"""Runtime's admin API for the browser console (`endpoints`), its audit (`repository`,
`models`)."""
