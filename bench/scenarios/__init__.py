"""One module per scenario; each returns the rows it adds to the table."""
