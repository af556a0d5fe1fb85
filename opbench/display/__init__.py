"""Terminal output with rich, one module per command's tables: sweep (results table and summary), peak,
tune (trials, confirmation, history, studies) and report (compare, suites). The CLI gathers the data and
prints what these build; nothing here measures or reads files. How numbers read is opbench/texts.py, shared
with the report's Markdown and HTML."""
