"""Renderers: draw analysis results (terminal tables); they compute nothing of their own."""
