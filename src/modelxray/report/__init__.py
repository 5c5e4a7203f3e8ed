"""The report writer: JSON, Markdown summary and insights, figures and the dashboard, asked of each result."""
