"""The render layer: text, tables, pictures and the live progress bar, from data and analysis."""
