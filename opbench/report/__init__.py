"""Reports from sweep results and tuning studies: a data model (model.py), plots (plots.py), and HTML,
Markdown, CSV and JSON writers (render.py); run comparison (compare.py)."""
