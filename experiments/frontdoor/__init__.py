"""The front door's data: the methods section of a device profile, built from the as-called measurements."""
