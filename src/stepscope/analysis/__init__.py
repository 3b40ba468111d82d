"""Pure analyses over a recorded run: they return data and never print, plot or open anything."""
