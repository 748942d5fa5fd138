"""tether."""
